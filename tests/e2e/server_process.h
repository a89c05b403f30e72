// Starts `dsv4 serve` as a child process on a free loopback port for end-to-end tests,
// waits for /health 200, and stops it (SIGTERM, then SIGKILL after a timeout).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <atomic>
#include <vector>

#include "tests/e2e/http_client.h"

namespace dsv4::testing {

// A free loopback port below the kernel's ephemeral range (32768+), so that the many client
// sockets of concurrently running tests cannot take it between this check and the bind.
inline uint16_t free_port() {
  static std::atomic<uint32_t> salt{static_cast<uint32_t>(::getpid()) * 7919u};
  for (int attempt = 0; attempt < 200; ++attempt) {
    const auto port = static_cast<uint16_t>(20000 + (salt.fetch_add(104729) % 12000));
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    if (ok) return port;
  }
  return 0;
}

class ServerProcess {
 public:
  // binary: path of dsv4; args after "serve --host 127.0.0.1 --port <port>".
  ServerProcess(const std::string& binary, std::vector<std::string> args, uint16_t port = 0)
      : port_(port ? port : free_port()) {
    log_path_ = "/tmp/dsv4_e2e_" + std::to_string(::getpid()) + "_" + std::to_string(port_) + ".log";
    std::vector<std::string> argv = {binary, "serve", "--host", "127.0.0.1", "--port", std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      ::execv(cargv[0], cargv.data());
      ::_exit(127);
    }
  }
  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

  // Polls /health until 200; false when the process died or the timeout passed.
  bool wait_ready(std::chrono::seconds timeout = std::chrono::seconds(300)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (poll_exit()) return false;
      if (http_request(port_, "GET", "/health").status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // True once the child has exited (status in exit_code()).
  bool poll_exit() {
    if (exited_) return true;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    return exited_;
  }
  // Waits for exit; returns the exit code or -1 on timeout.
  int wait_exit(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!poll_exit()) {
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return exit_code_;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  uint16_t port_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  std::string log_path_;
};

}  // namespace dsv4::testing
