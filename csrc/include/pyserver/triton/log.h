// BackendLog: where the log lines backends write (TRITONSERVER_LogMessage)
// go and how they read, per the server's logging settings as they change:
// which levels, stderr or the --log-file, Triton's default or ISO8601 layout.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <string>

#include "pyserver/status.h"
#include "triton/core/tritonserver.h"

namespace pyserver::triton {

class BackendLog {
 public:
  // The process's one log (backends share the server's).
  static BackendLog& Get();

  void SetLevels(bool info, bool warning, bool error, bool verbose);
  bool Enabled(TRITONSERVER_LogLevel level) const;

  // Lines go to `path` (appended), or to stderr when it is empty. A file
  // that cannot be opened leaves the output as it was and says why.
  // `escape`: messages are written as JSON strings (Triton's
  // TRITON_SERVER_ESCAPE_LOG_MESSAGES).
  Status SetOutput(const std::string& path, bool iso8601, bool escape);

  // One line, written whole with one write(2).
  void Write(TRITONSERVER_LogLevel level, const char* file, int line, const char* message);

  ~BackendLog();

 private:
  BackendLog() = default;
  std::atomic<uint32_t> levels_{0x7};  // bit n: TRITONSERVER_LogLevel n (INFO, WARN, ERROR)
  std::mutex mu_;                      // guards what follows
  int fd_ = 2;
  bool own_fd_ = false;
  bool iso8601_ = false;
  bool escape_ = true;
};

// A log line as Triton lays it out, newline included: "I1205 19:20:00.123456
// <pid> file.cc:42] message" or, ISO8601, "2026-12-05T19:20:00Z I <pid>
// file.cc:42] message"; `file` without its folders, UTC. With `escape` the
// message is a JSON string unless it starts a new line (a table).
std::string FormatLogLine(TRITONSERVER_LogLevel level, const timespec& when, long pid,
                          const char* file, int line, const char* message, bool iso8601,
                          bool escape);

}  // namespace pyserver::triton
