// Job tokens from the environment and from files: precedence, bad files named, and the atomic create-or-read
// that lets every node of a job share one file.
#include "store/job_token.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

std::string Temp(const std::string& name) { return absl::StrCat(::testing::TempDir(), "/", name, "_", ::getpid()); }

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(JobTokenTest, VariableThenFileThenNone) {
  const std::string file = Temp("token");
  WriteFile(file, "  from-file\n");
  EXPECT_EQ(*JobTokenFromEnv(Env({{"DDP_JOB_TOKEN", "direct"}, {"DDP_JOB_TOKEN_FILE", file}})), "direct");
  EXPECT_EQ(*JobTokenFromEnv(Env({{"DDP_JOB_TOKEN_FILE", file}})), "from-file");
  EXPECT_EQ(*JobTokenFromEnv(Env({{"DDP_JOB_TOKEN", ""}, {"DDP_JOB_TOKEN_FILE", file}})), "from-file");
  EXPECT_EQ(*JobTokenFromEnv(Env({})), "");
}

TEST(JobTokenTest, BadFilesAreNamed) {
  const absl::StatusOr<std::string> missing = ReadJobTokenFile("/nonexistent/token");
  EXPECT_TRUE(absl::IsInvalidArgument(missing.status()));
  EXPECT_THAT(missing.status().message(), HasSubstr("job token file /nonexistent/token: "));
  EXPECT_THAT(JobTokenFromEnv(Env({{"DDP_JOB_TOKEN_FILE", "/nonexistent/token"}})).status().message(),
              HasSubstr("(DDP_JOB_TOKEN_FILE)"));
  const std::string empty = Temp("empty");
  WriteFile(empty, "\n\n");
  EXPECT_THAT(ReadJobTokenFile(empty).status().message(), HasSubstr("it is empty"));
  const std::string spaced = Temp("spaced");
  WriteFile(spaced, "two words\n");
  EXPECT_THAT(ReadJobTokenFile(spaced).status().message(), HasSubstr("whitespace or control characters"));
  const std::string huge = Temp("huge");
  WriteFile(huge, std::string(kMaxJobTokenBytes + 1, 'a'));
  EXPECT_THAT(ReadJobTokenFile(huge).status().message(), HasSubstr("at most 4096 bytes"));
}

TEST(JobTokenTest, CreateOrReadMakesOnePrivateTokenForEveryCaller) {
  const std::string path = Temp("shared_token");
  ::unlink(path.c_str());
  std::vector<std::string> tokens(8);
  std::vector<std::thread> creators;
  for (size_t i = 0; i < tokens.size(); ++i) {
    creators.emplace_back([&, i] {
      absl::StatusOr<std::string> token = CreateOrReadJobTokenFile(path);
      tokens[i] = token.ok() ? *token : token.status().ToString();
    });
  }
  for (std::thread& t : creators) t.join();
  for (const std::string& token : tokens) EXPECT_EQ(token, tokens[0]);
  EXPECT_EQ(tokens[0].size(), 32u);
  struct stat info = {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(*ReadJobTokenFile(path), tokens[0]);
  EXPECT_THAT(CreateOrReadJobTokenFile("/nonexistent/dir/token").status().message(), HasSubstr("cannot create it"));
}

}  // namespace
}  // namespace ddp
