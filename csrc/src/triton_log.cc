#include "pyserver/triton/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "pyserver/json_string.h"

namespace pyserver::triton {

BackendLog& BackendLog::Get() {
  static BackendLog* log = new BackendLog();  // never destroyed: backends may log at exit
  return *log;
}

BackendLog::~BackendLog() {
  if (own_fd_) close(fd_);
}

void BackendLog::SetLevels(bool info, bool warning, bool error, bool verbose) {
  levels_.store((info ? 1u << TRITONSERVER_LOG_INFO : 0) |
                    (warning ? 1u << TRITONSERVER_LOG_WARN : 0) |
                    (error ? 1u << TRITONSERVER_LOG_ERROR : 0) |
                    (verbose ? 1u << TRITONSERVER_LOG_VERBOSE : 0),
                std::memory_order_relaxed);
}

bool BackendLog::Enabled(TRITONSERVER_LogLevel level) const {
  const auto bit = static_cast<unsigned>(level);
  return bit < 32 && (levels_.load(std::memory_order_relaxed) >> bit & 1u) != 0;
}

Status BackendLog::SetOutput(const std::string& path, bool iso8601, bool escape) {
  int fd = 2;
  if (!path.empty()) {
    fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      return Status(StatusCode::kInvalidArg,
                    "failed to open log file '" + path + "': " + std::strerror(errno));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (own_fd_) close(fd_);
  fd_ = fd;
  own_fd_ = !path.empty();
  iso8601_ = iso8601;
  escape_ = escape;
  return Status::Ok();
}

void BackendLog::Write(TRITONSERVER_LogLevel level, const char* file, int line,
                       const char* message) {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  std::lock_guard<std::mutex> lock(mu_);
  const std::string text = FormatLogLine(level, now, static_cast<long>(getpid()), file, line,
                                         message, iso8601_, escape_);
  // A short write (a full disk) loses the rest of the line: logging never
  // fails the backend.
  ssize_t written;
  do {
    written = ::write(fd_, text.data(), text.size());
  } while (written < 0 && errno == EINTR);
}

std::string FormatLogLine(TRITONSERVER_LogLevel level, const timespec& when, long pid,
                          const char* file, int line, const char* message, bool iso8601,
                          bool escape) {
  static const char kLetters[] = {'I', 'W', 'E', 'V'};
  const char letter = static_cast<unsigned>(level) < 4 ? kLetters[level] : 'I';
  tm utc;
  gmtime_r(&when.tv_sec, &utc);
  char head[64];
  if (iso8601) {
    std::snprintf(head, sizeof head, "%04d-%02d-%02dT%02d:%02d:%02dZ %c", utc.tm_year + 1900,
                  utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, letter);
  } else {
    std::snprintf(head, sizeof head, "%c%02d%02d %02d:%02d:%02d.%06ld", letter, utc.tm_mon + 1,
                  utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, when.tv_nsec / 1000);
  }
  const char* name = file != nullptr ? file : "";
  const char* slash = std::strrchr(name, '/');
  if (slash != nullptr) name = slash + 1;
  if (message == nullptr) message = "";
  std::string out = head;
  out += ' ' + std::to_string(pid) + ' ' + name + ':' + std::to_string(line) + "] ";
  if (escape && message[0] != '\n') {
    AppendJsonString(message, &out);
  } else {
    out += message;
  }
  out.push_back('\n');
  return out;
}

}  // namespace pyserver::triton
