#pragma once
// A capture file in the classic libpcap format (the format `tcpdump -w` writes; documented in
// pcap-savefile(5) and draft-ietf-opsawg-pcap): a 24-byte file header, then per packet a 16-byte
// record header and the packet bytes. We write the nanosecond variant (magic 0xa1b23c4d, which
// tcpdump and Wireshark read) with link type LINKTYPE_RAW (101): packets start at the IP header,
// so no made-up Ethernet addresses are needed. Host byte order, as the magic tells readers.
// Written directly (the format is small and fixed) rather than through libpcap.
// Thread affinity: one thread. Error contract: the constructor and write errors throw
// std::system_error naming the file; a writer destroyed without finish() removes the file it
// created, so a failed export leaves no capture that looks complete.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/UniqueFd.h"

namespace splicegate::audittool {

class PcapWriter {
  public:
    static constexpr std::uint32_t kSnapLength = 262144;  // tcpdump's default
    static constexpr std::uint32_t kLinkTypeRaw = 101;

    // `path` "-" = stdout.
    explicit PcapWriter(const std::string& path);
    ~PcapWriter();
    PcapWriter(const PcapWriter&) = delete;
    PcapWriter& operator=(const PcapWriter&) = delete;

    // `timeNs` since the epoch; times before it are written as 0.
    void packet(std::int64_t timeNs, const std::uint8_t* data, std::size_t length);
    // Flushes and closes; throws on a write or close error.
    void finish();

  private:
    void append(const void* data, std::size_t length);
    void flush();

    std::string path_;
    UniqueFd file_;
    int fd_ = -1;
    bool finished_ = false;
    std::vector<std::uint8_t> buffer_;
};

}  // namespace splicegate::audittool
