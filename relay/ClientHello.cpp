#include "relay/ClientHello.h"

#include <algorithm>
#include <vector>

namespace splicegate {
namespace {

constexpr std::uint8_t kContentHandshake = 22;
constexpr std::uint8_t kHandshakeClientHello = 1;
constexpr std::size_t kRecordHeaderBytes = 5;
constexpr std::size_t kMaxRecordPayload = 16384;  // TLSPlaintext.length <= 2^14
constexpr std::uint16_t kExtensionServerName = 0;
constexpr std::uint8_t kNameTypeHostName = 0;
constexpr std::size_t kMaxHostNameBytes = 255;

ClientHelloParse result(ClientHelloParse::Status status, std::string problem = {}) {
    ClientHelloParse parse;
    parse.status = status;
    parse.problem = std::move(problem);
    return parse;
}

ClientHelloParse needMore(std::size_t total) {
    ClientHelloParse parse;
    parse.needBytes = total;
    return parse;
}

// Reads big-endian fields from a message, never past its end.
class Reader {
  public:
    explicit Reader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
    bool skip(std::size_t n) {
        if (bytes_.size() - at_ < n) return false;
        at_ += n;
        return true;
    }
    bool number(std::size_t width, std::size_t& value) {
        if (bytes_.size() - at_ < width) return false;
        value = 0;
        for (std::size_t i = 0; i < width; ++i) value = (value << 8) | bytes_[at_ + i];
        at_ += width;
        return true;
    }
    // A block whose length comes first in `width` bytes.
    bool block(std::size_t width, std::span<const std::uint8_t>& out) {
        std::size_t length = 0;
        if (!number(width, length) || bytes_.size() - at_ < length) return false;
        out = bytes_.subspan(at_, length);
        at_ += length;
        return true;
    }
    bool atEnd() const noexcept { return at_ == bytes_.size(); }

  private:
    std::span<const std::uint8_t> bytes_;
    std::size_t at_ = 0;
};

// The host_name of a server_name extension: lower-cased; letters, digits, '-', '_' and '.'.
ClientHelloParse serverNameOf(std::span<const std::uint8_t> extension) {
    Reader reader(extension);
    std::span<const std::uint8_t> list;
    if (!reader.block(2, list) || !reader.atEnd() || list.empty())
        return result(ClientHelloParse::Status::Invalid, "server_name extension malformed");
    Reader names(list);
    ClientHelloParse parse = result(ClientHelloParse::Status::Complete);
    while (!names.atEnd()) {
        std::size_t type = 0;
        std::span<const std::uint8_t> name;
        if (!names.number(1, type) || !names.block(2, name))
            return result(ClientHelloParse::Status::Invalid, "server_name list malformed");
        if (type != kNameTypeHostName || !parse.serverName.empty()) continue;
        if (name.empty() || name.size() > kMaxHostNameBytes)
            return result(ClientHelloParse::Status::Invalid, "server name empty or too long");
        for (std::uint8_t c : name) {
            bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.';
            if (!ok)
                return result(ClientHelloParse::Status::Invalid, "server name not a host name");
            parse.serverName.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
        }
    }
    // A fully qualified name's trailing dot names the same host.
    if (!parse.serverName.empty() && parse.serverName.back() == '.') parse.serverName.pop_back();
    return parse;
}

ClientHelloParse parseMessage(std::span<const std::uint8_t> body) {
    Reader reader(body);
    std::span<const std::uint8_t> ignored;
    std::size_t majorVersion = 0;
    if (!reader.number(1, majorVersion) || majorVersion != 3 || !reader.skip(1 + 32))
        return result(ClientHelloParse::Status::Invalid, "ClientHello version or random malformed");
    if (!reader.block(1, ignored) || ignored.size() > 32)
        return result(ClientHelloParse::Status::Invalid, "ClientHello session id malformed");
    if (!reader.block(2, ignored) || ignored.empty() || ignored.size() % 2 != 0)
        return result(ClientHelloParse::Status::Invalid, "ClientHello cipher suites malformed");
    if (!reader.block(1, ignored) || ignored.empty())
        return result(ClientHelloParse::Status::Invalid, "ClientHello compression malformed");
    ClientHelloParse parse = result(ClientHelloParse::Status::Complete);
    if (reader.atEnd()) return parse;  // no extensions at all: no name
    std::span<const std::uint8_t> extensions;
    if (!reader.block(2, extensions) || !reader.atEnd())
        return result(ClientHelloParse::Status::Invalid, "ClientHello extensions malformed");
    Reader each(extensions);
    bool seen = false;
    while (!each.atEnd()) {
        std::size_t type = 0;
        std::span<const std::uint8_t> data;
        if (!each.number(2, type) || !each.block(2, data))
            return result(ClientHelloParse::Status::Invalid, "ClientHello extension malformed");
        if (type != kExtensionServerName) continue;
        if (seen) return result(ClientHelloParse::Status::Invalid, "server_name given twice");
        seen = true;
        parse = serverNameOf(data);
        if (parse.status != ClientHelloParse::Status::Complete) return parse;
    }
    return parse;
}

}  // namespace

ClientHelloParse parseClientHello(std::span<const std::uint8_t> bytes) {
    // The handshake message is gathered from the records' payloads; it is at most 16 KiB.
    std::vector<std::uint8_t> message;
    std::size_t at = 0;
    std::size_t messageLength = 0;  // known once its 4-byte header is in
    for (;;) {
        if (at >= kMaxClientHelloRecordBytes)
            return result(ClientHelloParse::Status::TooLarge,
                          "ClientHello spread over more than " +
                              std::to_string(kMaxClientHelloRecordBytes) + " bytes of records");
        if (bytes.size() - at < kRecordHeaderBytes) {
            // Not a handshake record: no need to wait for the rest of its header.
            if (bytes.size() > at && bytes[at] != kContentHandshake)
                return result(ClientHelloParse::Status::Invalid, "not a TLS handshake record");
            if (bytes.size() > at + 1 && bytes[at + 1] != 3)
                return result(ClientHelloParse::Status::Invalid, "not a TLS record version");
            return needMore(at + kRecordHeaderBytes);
        }
        const std::uint8_t* header = bytes.data() + at;
        if (header[0] != kContentHandshake)
            return result(ClientHelloParse::Status::Invalid, "not a TLS handshake record");
        if (header[1] != 3)
            return result(ClientHelloParse::Status::Invalid, "not a TLS record version");
        std::size_t recordLength = (std::size_t{header[3]} << 8) | header[4];
        if (recordLength == 0 || recordLength > kMaxRecordPayload)
            return result(ClientHelloParse::Status::Invalid, "TLS record length out of range");
        std::size_t available = std::min(recordLength, bytes.size() - at - kRecordHeaderBytes);
        std::size_t wanted = messageLength == 0 ? recordLength : messageLength - message.size();
        std::size_t take = std::min(available, wanted);
        message.insert(message.end(), header + kRecordHeaderBytes,
                       header + kRecordHeaderBytes + take);
        if (messageLength == 0 && message.size() >= 4) {
            if (message[0] != kHandshakeClientHello)
                return result(ClientHelloParse::Status::Invalid, "first handshake not ClientHello");
            messageLength =
                4 + ((std::size_t{message[1]} << 16) | (std::size_t{message[2]} << 8) | message[3]);
            if (messageLength > kMaxClientHelloBytes)
                return result(ClientHelloParse::Status::TooLarge,
                              "ClientHello of " + std::to_string(messageLength) +
                                  " bytes (more than 16 KiB)");
            if (message.size() > messageLength) message.resize(messageLength);
        }
        if (messageLength != 0 && message.size() >= messageLength)
            return parseMessage(std::span<const std::uint8_t>(message).subspan(4));
        if (available < recordLength) return needMore(at + kRecordHeaderBytes + recordLength);
        at += kRecordHeaderBytes + recordLength;
    }
}

}  // namespace splicegate
