#pragma once
// What every module's options file (audit/AuditOptions.h, datapath/DatapathOptions.h,
// relay/RelayOptions.h, admin/AdminOptions.h, metrics/MetricsOptions.h, xdp/XdpOptions.h)
// declares its options with and reads them back through: value checks whose errors name the
// option as the user wrote it (--name on the command line, "FILE: name" in the config file).
// relay/Config.cpp composes the modules' groups, parses, and hands each module an OptionValues.
// Error contract: every bad value throws UsageError with one line naming the option.
#include <boost/program_options.hpp>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/Error.h"
#include "common/SocketAddress.h"

namespace splicegate {

// ---- Names of enumerated values: one table per type serves parsing, help defaults and errors.

template <typename E>
struct Named {
    const char* name;
    E value;
};

inline constexpr Named<bool> kOnOffNames[] = {{"on", true},     {"off", false}, {"true", true},
                                              {"false", false}, {"yes", true},  {"no", false},
                                              {"1", true},      {"0", false}};
inline constexpr Named<bool> kBoolNames[] = {{"true", true}, {"false", false}, {"yes", true},
                                             {"no", false},  {"1", true},      {"0", false}};

template <typename E, std::size_t N>
const char* nameOf(const Named<E> (&table)[N], E value) noexcept {
    for (const auto& entry : table)
        if (entry.value == value) return entry.name;
    return "?";
}

template <typename E, std::size_t N>
std::optional<E> valueOf(const Named<E> (&table)[N], std::string_view text) noexcept {
    for (const auto& entry : table)
        if (text == entry.name) return entry.value;
    return std::nullopt;
}

// "strict, batch or none", for error messages.
template <typename E, std::size_t N>
std::string choicesOf(const Named<E> (&table)[N]) {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
        if (i > 0) out += i + 1 == N ? " or " : ", ";
        out += table[i].name;
    }
    return out;
}

template <typename E, std::size_t N>
E parseChoice(const Named<E> (&table)[N], const std::string& text, const std::string& label) {
    if (auto value = valueOf(table, text)) return *value;
    throw UsageError(label + ": invalid value '" + text + "' (expected " + choicesOf(table) + ")");
}

// ---- Value checks shared by the command line, the file's top level and route sections.

// Every number is read as a string first: Boost would silently wrap "-1" into an unsigned.
std::uint64_t parseNumber(const std::string& text, std::uint64_t min, std::uint64_t max,
                          const std::string& label);

// Numeric IPv4:PORT or [IPv6]:PORT, port 1..65535.
SocketAddress parseListenAddress(const std::string& text, const std::string& label);

// ---- Describing options: every value is taken as text (checked when read), its default shown
// in --help comes from the module's default-constructed settings.

boost::program_options::typed_value<std::string>* scalar(const char* valueName);
boost::program_options::typed_value<std::string>* scalar(const char* valueName,
                                                         const std::string& defaultText);
boost::program_options::typed_value<std::vector<std::string>>* repeatable(const char* valueName);

// ---- Reading options back.

class OptionValues {
  public:
    // `file`: the config file read (empty: none); `fromCommandLine`: the keys given there;
    // `fileLines`: the line of each key the file gives. With `problems`, a bad number or choice
    // is recorded there and a harmless value returned, so that one pass finds every problem
    // (the caller fails if any was recorded); without, it throws.
    OptionValues(const boost::program_options::variables_map& values, std::string file,
                 std::set<std::string> fromCommandLine,
                 std::map<std::string, unsigned> fileLines = {},
                 std::vector<std::string>* problems = nullptr)
        : values_(values),
          file_(std::move(file)),
          fromCommandLine_(std::move(fromCommandLine)),
          fileLines_(std::move(fileLines)),
          problems_(problems) {}

    bool has(const std::string& key) const { return values_.count(key) > 0; }
    std::string text(const std::string& key) const;
    std::vector<std::string> list(const std::string& key) const;

    template <typename T>
    T number(const std::string& key, std::uint64_t min = 0,
             std::uint64_t max = std::numeric_limits<T>::max()) const {
        try {
            return static_cast<T>(parseNumber(text(key), min, max, label(key)));
        } catch (const UsageError& error) {
            record(error);
            return static_cast<T>(min);
        }
    }

    template <typename E, std::size_t N>
    E choice(const Named<E> (&table)[N], const std::string& key) const {
        try {
            return parseChoice(table, text(key), label(key));
        } catch (const UsageError& error) {
            record(error);
            return table[0].value;
        }
    }

    // How an error names the option: as the user wrote it, on the command line or in the file.
    std::string label(const std::string& key) const;
    const std::string& file() const noexcept { return file_; }

  private:
    void record(const UsageError& error) const;

    const boost::program_options::variables_map& values_;
    std::string file_;
    std::set<std::string> fromCommandLine_;
    std::map<std::string, unsigned> fileLines_;
    std::vector<std::string>* problems_;
};

// The options whose values differ between two settings of one module, by option name, for the
// reload's "takes effect at the next start" list.
class ChangedOptions {
  public:
    template <typename T>
    void check(const char* name, const T& running, const T& next) {
        if (!(running == next)) names_.emplace_back(name);
    }
    std::vector<std::string> names() && { return std::move(names_); }

  private:
    std::vector<std::string> names_;
};

}  // namespace splicegate
