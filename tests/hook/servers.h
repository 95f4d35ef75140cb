/* SPDX-License-Identifier: MIT */
// Real servers for the fern-hook client tests and benchmarks: redis-server
// and PostgreSQL, each started on a free 127.0.0.1 port (PostgreSQL also on
// a unix socket) in a fresh temporary directory, and stopped (SIGTERM, then
// SIGKILL) when the object goes away, whatever happened meanwhile.
//
// PostgreSQL refuses to run as root: as root, initdb and postgres run as the
// `postgres` system user (created by Debian's postgresql package) through
// runuser, and the directory is handed to that user. A server that does not
// start is an error with the reason (its log), never a skip.
#ifndef FERN_TESTS_HOOK_SERVERS_H
#define FERN_TESTS_HOOK_SERVERS_H

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hook_servers {

inline int free_port() {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) ||
        getsockname(s, (struct sockaddr *)&a, &al))
        throw std::runtime_error("no free port");
    close(s);
    return ntohs(a.sin_port);
}

inline bool port_open(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return ok;
}

inline std::string slurp(const std::string &path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Run argv (as `user` if not empty and we are root), output to `log`.
// Returns the pid; `wait` runs it to the end and returns its exit status.
inline pid_t spawn(const std::vector<std::string> &argv0, const std::string &user,
                   const std::string &log, bool wait = false, int *status = nullptr) {
    std::vector<std::string> argv;
    if (!user.empty() && geteuid() == 0) argv = {"/usr/sbin/runuser", "-u", user, "--"};
    argv.insert(argv.end(), argv0.begin(), argv0.end());
    std::vector<char *> a;
    for (auto &s : argv) a.push_back(const_cast<char *>(s.c_str()));
    a.push_back(nullptr);
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        FILE *f = fopen(log.c_str(), "a");
        if (f) {
            dup2(fileno(f), 1);
            dup2(fileno(f), 2);
        }
        setpgid(0, 0);
        execv(a[0], a.data());
        _exit(127);
    }
    if (wait) {
        int st = 0;
        waitpid(pid, &st, 0);
        if (status) *status = st;
    }
    return pid;
}

// The whole process group (runuser and the server under it) gets `sig`.
inline void stop(pid_t pid, int sig = SIGTERM) {
    if (pid <= 0) return;
    kill(-pid, sig);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, nullptr, WNOHANG) == pid) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
}

inline std::string make_tmpdir(const char *tag) {
    std::string t = std::string("/tmp/fern-") + tag + "-XXXXXX";
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    return t;
}

inline void rm_rf(const std::string &dir) {
    if (dir.size() > 10) {
        std::string cmd = "rm -rf '" + dir + "'";
        if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", dir.c_str());
    }
}

struct Redis {
    std::string dir;
    int port = 0;
    pid_t pid = -1;
    Redis() {
        dir = make_tmpdir("redis");
        port = free_port();
        std::string log = dir + "/log";
        pid = spawn({"/usr/bin/redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1",
                     "--save", "", "--appendonly", "no", "--dir", dir, "--maxclients", "10000"},
                    "", log);
        for (int i = 0; i < 200 && !port_open(port); i++)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (!port_open(port)) {
            std::string l = slurp(log);
            stop(pid);
            rm_rf(dir);
            throw std::runtime_error("redis-server did not start on port " + std::to_string(port) +
                                     "; is the redis-server package installed? log:\n" + l);
        }
    }
    ~Redis() {
        stop(pid);
        rm_rf(dir);
    }
};

inline std::string pg_bindir() {
    DIR *d = opendir("/usr/lib/postgresql");
    std::string best;
    if (d) {
        while (struct dirent *e = readdir(d))
            if (e->d_name[0] != '.' && std::string(e->d_name) > best) best = e->d_name;
        closedir(d);
    }
    if (best.empty())
        throw std::runtime_error("no /usr/lib/postgresql/<version>: is the postgresql package installed?");
    return "/usr/lib/postgresql/" + best + "/bin";
}

struct Postgres {
    std::string dir, user;
    int port = 0;
    pid_t pid = -1;
    Postgres() {
        dir = make_tmpdir("pg");
        port = free_port();
        if (geteuid() == 0) {
            user = "postgres";
            struct passwd *pw = getpwnam(user.c_str());
            if (!pw) {
                rm_rf(dir);
                throw std::runtime_error("running as root and there is no `postgres` user to run "
                                         "PostgreSQL as (the postgresql package creates it)");
            }
            if (chown(dir.c_str(), pw->pw_uid, pw->pw_gid)) throw std::runtime_error("chown failed");
        } else {
            struct passwd *pw = getpwuid(geteuid());
            user = pw ? pw->pw_name : "postgres";
        }
        std::string bin = pg_bindir(), log = dir + "/log", data = dir + "/data";
        int st = 0;
        spawn({bin + "/initdb", "-D", data, "-A", "trust", "-U", user, "--no-sync"}, user, log, true,
              &st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail("initdb failed");
        pid = spawn({bin + "/postgres", "-D", data, "-k", dir, "-p", std::to_string(port), "-c",
                     "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=300",
                     "-c", "shared_buffers=16MB"},
                    user, log);
        std::string sock = dir + "/.s.PGSQL." + std::to_string(port);
        struct stat sb;
        for (int i = 0; i < 400 && !(port_open(port) && stat(sock.c_str(), &sb) == 0); i++)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (!port_open(port)) fail("postgres did not start");
        // Accepting connections only once start-up finished: wait for the log line.
        for (int i = 0; i < 400 && slurp(log).find("ready to accept") == std::string::npos; i++)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    [[noreturn]] void fail(const std::string &what) {
        std::string l = slurp(dir + "/log");
        stop(pid, SIGINT);
        rm_rf(dir);
        throw std::runtime_error(what + " (port " + std::to_string(port) + "); log:\n" + l);
    }
    std::string conninfo_unix() const {
        return "host=" + dir + " port=" + std::to_string(port) + " user=" + user + " dbname=postgres";
    }
    std::string conninfo_tcp() const {
        return "host=127.0.0.1 port=" + std::to_string(port) + " user=" + user + " dbname=postgres";
    }
    ~Postgres() {
        stop(pid, SIGINT); /* fast shutdown: do not wait for clients */
        rm_rf(dir);
    }
};

}  // namespace hook_servers
#endif
