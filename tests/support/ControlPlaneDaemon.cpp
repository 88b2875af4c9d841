#include "tests/support/ControlPlaneDaemon.h"

#include <sys/stat.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <thread>

namespace splicegate::test {

ControlPlaneDaemon::ControlPlaneDaemon(ControlPlaneOptions options)
    : options_(std::move(options)) {
    socketPath_ = dir_.path() + "/admin.sock";
    auditDir_ = dir_.path() + "/audit";
    if (options_.configText) configPath_ = dir_.path() + "/splicegate.conf";
}

ControlPlaneDaemon::~ControlPlaneDaemon() {
    daemon_.reset();  // SIGKILL + reap (by pid) if still running, before the TempDir goes
}

void ControlPlaneDaemon::writeConfig(const std::string& text) const {
    dir_.write("splicegate.conf", text);
}

bool ControlPlaneDaemon::start(milliseconds timeout) {
    listenPort_ = pickFreePort();
    metricsPort_ = pickFreePort();
    while (metricsPort_ == listenPort_) metricsPort_ = pickFreePort();
    if (options_.configText) writeConfig(*options_.configText);
    std::vector<std::string> extra = {"--admin-socket",   socketPath_,
                                      "--admin-group",    "root",
                                      "--metrics-listen", loopback(metricsPort_),
                                      "--audit-dir",      auditDir_};
    if (options_.configText) {
        extra.emplace_back("--config");
        extra.push_back(configPath_);
    }
    extra.insert(extra.end(), options_.extra.begin(), options_.extra.end());
    daemon_ = std::make_unique<Daemon>(
        relayArgs(listenPort_, options_.upstreams, extra, options_.workers));
    const Deadline deadline = deadlineIn(timeout);
    if (!daemon_->waitReady(listenPort_, timeout)) return false;
    for (;;) {
        struct stat st {};
        bool socketUp = ::stat(socketPath_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
        if (socketUp && isListening(metricsPort_)) return true;
        if (!daemon_->running() || Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(milliseconds(10));
    }
}

ProcessResult ControlPlaneDaemon::ctl(const std::vector<std::string>& args,
                                      milliseconds timeout) const {
    std::vector<std::string> argv = {ctlBinaryPath(), "--socket", socketPath_};
    argv.insert(argv.end(), args.begin(), args.end());
    return runProcess(argv, timeout);
}

std::string ctlBinaryPath() {
    return std::string(SPLICEGATE_BIN_DIR) + "/splicegatectl";
}

std::vector<std::string> textLines(const std::string& text) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        out.push_back(text.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

namespace {

bool parseSampleLine(const std::string& line, MetricSample& sample) {
    std::size_t i = 0;
    while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) ||
                               line[i] == '_' || line[i] == ':'))
        ++i;
    if (i == 0) return false;
    sample.name = line.substr(0, i);
    sample.labels.clear();
    if (i < line.size() && line[i] == '{') {
        ++i;
        for (;;) {
            while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
            if (i >= line.size()) return false;
            if (line[i] == '}') {
                ++i;
                break;
            }
            std::size_t eq = line.find('=', i);
            if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"')
                return false;
            std::string key = line.substr(i, eq - i);
            std::string value;
            std::size_t j = eq + 2;
            for (; j < line.size() && line[j] != '"'; ++j) {
                if (line[j] == '\\' && j + 1 < line.size()) {
                    ++j;
                    value += line[j] == 'n' ? '\n' : line[j];
                } else {
                    value += line[j];
                }
            }
            if (j >= line.size()) return false;
            sample.labels[key] = value;
            i = j + 1;
        }
    }
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size()) return false;
    std::string rest = line.substr(i);
    std::string number = rest.substr(0, rest.find(' '));  // an optional timestamp follows
    if (number == "+Inf") {
        sample.value = HUGE_VAL;
        return true;
    }
    if (number == "-Inf") {
        sample.value = -HUGE_VAL;
        return true;
    }
    char* end = nullptr;
    sample.value = std::strtod(number.c_str(), &end);
    return end != nullptr && *end == '\0' && !number.empty();
}

}  // namespace

std::vector<MetricSample> parseMetrics(const std::string& page, std::vector<std::string>* problems) {
    std::vector<MetricSample> samples;
    for (const auto& line : textLines(page)) {
        if (line.empty() || line[0] == '#') continue;
        MetricSample sample;
        if (parseSampleLine(line, sample)) {
            sample.line = line;
            samples.push_back(std::move(sample));
        } else if (problems != nullptr) {
            problems->push_back(line);
        }
    }
    return samples;
}

std::vector<MetricSample> findSamples(const std::vector<MetricSample>& samples,
                                      const std::string& name,
                                      const std::map<std::string, std::string>& labels) {
    std::vector<MetricSample> found;
    for (const auto& sample : samples) {
        if (sample.name != name) continue;
        bool all = true;
        for (const auto& [key, value] : labels) {
            auto it = sample.labels.find(key);
            if (it == sample.labels.end() || it->second != value) {
                all = false;
                break;
            }
        }
        if (all) found.push_back(sample);
    }
    return found;
}

std::optional<double> sampleValue(const std::vector<MetricSample>& samples, const std::string& name,
                                  const std::map<std::string, std::string>& labels) {
    auto found = findSamples(samples, name, labels);
    if (found.size() != 1) return std::nullopt;
    return found.front().value;
}

std::string findOnPath(const std::string& name) {
    auto result = runProcess({"/bin/sh", "-c", "command -v " + name}, milliseconds(5000));
    if (!result.status || !result.status->isExit(0)) return "";
    std::string path = result.out;
    while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
    return path;
}

}  // namespace splicegate::test
