#include "relay/AccessLog.h"

#include <sys/socket.h>

namespace splicegate {

std::string formatAccessLine(const AccessRecord& record) {
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
    return line;
}

}  // namespace splicegate
