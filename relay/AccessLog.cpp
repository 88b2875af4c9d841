#include "relay/AccessLog.h"

#include <sys/socket.h>

#include <vector>

#include "audit/TextFormat.h"

namespace splicegate {
namespace {

struct Attempt {
    std::string upstream;
    std::string error;  // empty: connected
};

std::vector<Attempt> attemptsOf(const AccessRecord& record) {
    std::vector<Attempt> attempts;
    std::string_view rest = record.failedAttempts;
    while (!rest.empty()) {
        auto comma = rest.find(',');
        std::string_view item = rest.substr(0, comma);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        auto open = item.rfind('(');
        if (open == std::string_view::npos || item.back() != ')') {
            attempts.push_back({std::string(item), "error"});
            continue;
        }
        attempts.push_back({std::string(item.substr(0, open)),
                            std::string(item.substr(open + 1, item.size() - open - 2))});
    }
    if (record.connected) attempts.push_back({record.upstream.toString(), {}});
    return attempts;
}

std::int64_t unixNs(std::chrono::system_clock::time_point time) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}

std::string textLine(const AccessRecord& record) {
    std::string line = "access route=";
    line += record.route;
    line += " id=" + std::to_string(record.id);
    line += " client=" + record.client.toString();
    line += " upstream=";
    line += record.upstream.family() == AF_UNSPEC ? std::string("-") : record.upstream.toString();
    line += " c2u=" + std::to_string(record.bytesC2u);
    line += " u2c=" + std::to_string(record.bytesU2c);
    line += " duration_ms=" + std::to_string(record.durationMs);
    line += " reason=";
    line += toString(record.reason);
    line += " accepted=" + audittool::isoTime(unixNs(record.acceptedAt));
    line += " connect_ms=" + (record.connectMs ? std::to_string(*record.connectMs) : "-");
    line += " retries=" + std::to_string(record.attempts > 0 ? record.attempts - 1 : 0);
    line += " tried=";
    auto attempts = attemptsOf(record);
    if (attempts.empty()) line += "-";
    for (std::size_t i = 0; i < attempts.size(); ++i) {
        if (i > 0) line += ',';
        line += attempts[i].upstream;
        if (!attempts[i].error.empty()) line += "(" + attempts[i].error + ")";
    }
    line += " active=" + std::to_string(record.active);
    if (!record.serverName.empty()) {
        line += " sni=";
        line += record.serverName;
    }
    if (record.via.family() != AF_UNSPEC) line += " via=" + record.via.toString();
    return line;
}

std::string jsonLine(const AccessRecord& record) {
    using audittool::jsonString;
    std::string line = "{\"event\": \"access\", \"route\": " + jsonString(std::string(record.route));
    line += ", \"id\": " + std::to_string(record.id);
    line += ", \"client\": " + jsonString(record.client.toString());
    line += ", \"upstream\": " + (record.upstream.family() == AF_UNSPEC
                                      ? std::string("null")
                                      : jsonString(record.upstream.toString()));
    line += ", \"c2u\": " + std::to_string(record.bytesC2u);
    line += ", \"u2c\": " + std::to_string(record.bytesU2c);
    line += ", \"duration_ms\": " + std::to_string(record.durationMs);
    line += ", \"reason\": " + jsonString(toString(record.reason));
    line += ", \"accepted\": " + jsonString(audittool::isoTime(unixNs(record.acceptedAt)));
    line += ", \"connect_ms\": " +
            (record.connectMs ? std::to_string(*record.connectMs) : std::string("null"));
    line += ", \"retries\": " + std::to_string(record.attempts > 0 ? record.attempts - 1 : 0);
    line += ", \"tried\": [";
    auto attempts = attemptsOf(record);
    for (std::size_t i = 0; i < attempts.size(); ++i) {
        if (i > 0) line += ", ";
        line += "{\"upstream\": " + jsonString(attempts[i].upstream);
        if (!attempts[i].error.empty()) line += ", \"error\": " + jsonString(attempts[i].error);
        line += "}";
    }
    line += "], \"active\": " + std::to_string(record.active);
    if (!record.serverName.empty()) line += ", \"sni\": " + jsonString(std::string(record.serverName));
    if (record.via.family() != AF_UNSPEC) line += ", \"via\": " + jsonString(record.via.toString());
    line += "}";
    return line;
}

}  // namespace

std::string formatAccessLine(const AccessRecord& record, AccessLogFormat format) {
    return format == AccessLogFormat::Json ? jsonLine(record) : textLine(record);
}

}  // namespace splicegate
