// BackendLog: the layout of backends' log lines and where they go.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "pyserver/triton/log.h"

namespace pyserver::triton {
namespace {

const timespec kWhen = {1764962400 + 3723, 123456789};  // 2025-12-05 20:22:03.123456 UTC

TEST(BackendLog, DefaultLayoutStripsFoldersAndQuotesTheMessage) {
  EXPECT_EQ(FormatLogLine(TRITONSERVER_LOG_WARN, kWhen, 42, "/src/dir/backend.cc", 7,
                          "say \"hi\"\n\tthen\x01", false, true),
            "W1205 20:22:03.123456 42 backend.cc:7] \"say \\\"hi\\\"\\n\\tthen\\u0001\"\n");
}

TEST(BackendLog, Iso8601LayoutAndUnescapedMessages) {
  EXPECT_EQ(FormatLogLine(TRITONSERVER_LOG_VERBOSE, kWhen, 42, "b.cc", 9, "plain \"text\"", true,
                          false),
            "2025-12-05T20:22:03Z V 42 b.cc:9] plain \"text\"\n");
  // a message that starts a new line (a table) is written as it is
  EXPECT_EQ(FormatLogLine(TRITONSERVER_LOG_INFO, kWhen, 1, nullptr, 0, "\n+--+\n", false, true),
            "I1205 20:22:03.123456 1 :0] \n+--+\n\n");
}

TEST(BackendLog, LevelsAndFileOutput) {
  BackendLog& log = BackendLog::Get();
  char path[] = "/tmp/backend_log_testXXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_TRUE(log.SetOutput(path, false, true).ok());
  log.SetLevels(true, true, true, false);
  EXPECT_TRUE(log.Enabled(TRITONSERVER_LOG_INFO));
  EXPECT_FALSE(log.Enabled(TRITONSERVER_LOG_VERBOSE));
  log.Write(TRITONSERVER_LOG_ERROR, "x.cc", 3, "to the file");
  Status bad = log.SetOutput("/nonexistent-dir/log", false, true);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArg);
  EXPECT_NE(bad.message().find("failed to open log file '/nonexistent-dir/log'"),
            std::string::npos);
  log.Write(TRITONSERVER_LOG_ERROR, "x.cc", 4, "still the file");  // the output stayed
  ASSERT_TRUE(log.SetOutput("", false, true).ok());
  log.SetLevels(true, true, true, false);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  const std::string got = text.str();
  EXPECT_NE(got.find("x.cc:3] \"to the file\"\n"), std::string::npos) << got;
  EXPECT_NE(got.find("x.cc:4] \"still the file\"\n"), std::string::npos) << got;
  EXPECT_EQ(got.front(), 'E');
}

}  // namespace
}  // namespace pyserver::triton
