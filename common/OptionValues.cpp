#include "common/OptionValues.h"

#include <charconv>

namespace splicegate {
namespace po = boost::program_options;

std::uint64_t parseNumber(const std::string& text, std::uint64_t min, std::uint64_t max,
                          const std::string& label) {
    std::uint64_t value = 0;
    const char* end = text.data() + text.size();
    auto [stop, error] = std::from_chars(text.data(), end, value);
    if (error == std::errc::invalid_argument || stop != end)
        throw UsageError(label + ": invalid value '" + text +
                         "' (expected a non-negative integer)");
    if (error == std::errc::result_out_of_range || value < min || value > max)
        throw UsageError(label + ": value '" + text + "' out of range " + std::to_string(min) +
                         ".." + std::to_string(max));
    return value;
}

SocketAddress parseListenAddress(const std::string& text, const std::string& label) {
    auto address = SocketAddress::parseNumeric(text);
    if (!address || address->port() == 0)
        throw UsageError(label + ": invalid address '" + text +
                         "' (expected numeric IPv4:PORT or [IPv6]:PORT, port 1..65535)");
    return *address;
}

po::typed_value<std::string>* scalar(const char* valueName) {
    return po::value<std::string>()->value_name(valueName);
}

po::typed_value<std::string>* scalar(const char* valueName, const std::string& defaultText) {
    return scalar(valueName)->default_value(defaultText);
}

po::typed_value<std::vector<std::string>>* repeatable(const char* valueName) {
    return po::value<std::vector<std::string>>()->value_name(valueName);
}

std::string OptionValues::text(const std::string& key) const {
    auto found = values_.find(key);
    return found == values_.end() ? std::string() : found->second.as<std::string>();
}

std::vector<std::string> OptionValues::list(const std::string& key) const {
    auto found = values_.find(key);
    if (found == values_.end()) return {};
    return found->second.as<std::vector<std::string>>();
}

std::string OptionValues::label(const std::string& key) const {
    if (file_.empty() || fromCommandLine_.count(key)) return "--" + key;
    auto line = fileLines_.find(key);
    if (line == fileLines_.end()) return file_ + ": " + key;
    return file_ + ":" + std::to_string(line->second) + ": " + key;
}

void OptionValues::record(const UsageError& error) const {
    if (problems_ == nullptr) throw error;
    problems_->emplace_back(error.what());
}

}  // namespace splicegate
