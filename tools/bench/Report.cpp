// `report`: reads run.sh's raw results (one "RUN<TAB>PARTY<TAB>METRIC<TAB>VALUE" per line) and
// prints the markdown tables: medians per party, ratios against direct and both HAProxy modes,
// the targets for each splicegate engine, and every run's raw values.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "tools/bench/BenchUtil.h"
#include "tools/bench/Commands.h"

namespace splicegate::bench {
namespace {

struct MetricDef {
    const char* key;
    const char* label;
    int decimals;
    bool relayOnly;  // meaningless for "direct" (no relay process)
    bool ratio;      // appears in the ratio tables
};

const MetricDef kMetrics[] = {
    {"bulk1_gbps", "(a) bulk, 1 stream: Gbit/s", 2, false, true},
    {"bulk8_gbps", "(a) bulk, 8 streams: Gbit/s", 2, false, true},
    {"bulk1_cpu_gib", "(b) relay CPU-s per GiB, 1 stream", 3, true, true},
    {"bulk8_cpu_gib", "(b) relay CPU-s per GiB, 8 streams", 3, true, true},
    {"bulk1_cpu_pct", "relay CPU % in bulk, 1 stream (100 = one core)", 0, true, false},
    {"bulk8_cpu_pct", "relay CPU % in bulk, 8 streams", 0, true, false},
    {"rr_rps", "(c) rr 64 B, 64 conns: req/s", 0, false, true},
    {"rr_p50_us", "(c) rr p50 latency, µs", 1, false, true},
    {"rr_p99_us", "(c) rr p99 latency, µs", 1, false, true},
    {"rr_cpu_us", "relay CPU µs per request", 2, true, true},
    {"rr_shared_cpu_pct", "rr: samples with two workers on one CPU, %", 0, true, false},
    {"rr_relay_cpu_ms", "rr: relay CPU time in the window, ms", 0, true, false},
    {"rr_relay_runq_wait_ms", "rr: relay threads runnable but waiting for a CPU, ms", 0, true,
     false},
    {"rr_relay_preempted", "rr: relay threads preempted (involuntary switches)", 0, true, false},
    {"rr_upstream_runq_wait_ms", "rr: echo upstream waiting for a CPU, ms", 0, false, false},
    {"rr_upstream_preempted", "rr: echo upstream preempted", 0, false, false},
    {"churn_cps", "(d) churn: new connections/s", 0, false, true},
    {"churn_p99_us", "(d) churn p99 connection time, µs", 0, false, false},
    {"churn_errors", "(d) churn errors (sum over runs)", 0, false, false},
    {"churn_cpu_us", "relay CPU µs per connection", 1, true, true},
    {"churn_shared_cpu_pct", "churn: samples with two workers on one CPU, %", 0, true, false},
    {"churn_relay_runq_wait_ms", "churn: relay threads waiting for a CPU, ms", 0, true, false},
    {"churn_relay_preempted", "churn: relay threads preempted", 0, true, false},
    {"bulk1_copy_bytes", "copy of the streams on disk after bulk 1 (incl. warm-up), bytes", 0, true,
     false},
    {"bulk8_copy_bytes", "copy of the streams on disk after bulk 8 (incl. warm-up), bytes", 0, true,
     false},
    {"idle_held", "(e) idle connections held", 0, false, false},
    {"idle_open_s", "(e) seconds to open them (1-byte echo each)", 2, false, false},
    {"idle_rss_before_kib", "(e) relay RSS before, KiB", 0, true, false},
    {"idle_rss_held_kib", "(e) relay RSS at the end of the hold, KiB", 0, true, false},
    {"idle_rss_per_conn_b", "(e) relay RSS per idle connection, bytes", 0, true, true},
    {"idle_threads_before", "(e) relay threads before", 0, true, false},
    {"idle_threads_held", "(e) relay threads at the end of the hold", 0, true, false},
    {"idle_threads_max", "(e) relay threads, max from 1 s after opening", 0, true, false},
    {"idle_pipes_before", "(e) pipe fds in relay before", 0, true, false},
    {"idle_pipes_held", "(e) pipe fds in relay at the end of the hold", 0, true, false},
};

const std::map<std::string, std::string> kPartyNames = {
    {"direct", "direct"},
    {"splicegate-chain", "splicegate chain"},
    {"splicegate-inline", "splicegate inline"},
    {"haproxy-splice", "HAProxy splice"},
    {"haproxy-nosplice", "HAProxy no-splice"},
    {"splicegate-inline-audit", "splicegate inline + audit batch"},
    {"splicegate-chain-audit", "splicegate chain + audit batch"},
    {"splicegate-inline-strict", "splicegate inline + audit strict"},
    {"haproxy-splice-tcpdump", "HAProxy splice + tcpdump -w"},
};

// "splicegate-inline-audit" -> "splicegate-inline": the same engine without the audit.
std::string withoutAudit(const std::string& party) {
    auto dash = party.rfind('-');
    return party.substr(0, dash);
}

bool keepsACopy(const std::string& party) {
    return party.size() > 6 && (party.ends_with("-audit") || party.ends_with("-strict"));
}

std::string partyName(const std::string& party) {
    auto it = kPartyNames.find(party);
    return it != kPartyNames.end() ? it->second : party;
}

std::string fixed(double value, int decimals) {
    std::ostringstream out;
    out << std::fixed << std::setprecision(decimals) << value;
    return out.str();
}

// party -> metric -> values over runs
using Table = std::map<std::string, std::map<std::string, std::vector<double>>>;

class Report {
  public:
    Report(Table table, std::vector<std::string> parties)
        : table_(std::move(table)), parties_(std::move(parties)) {}

    std::optional<double> value(const std::string& party, const std::string& metric) const {
        auto p = table_.find(party);
        if (p == table_.end()) return std::nullopt;
        auto m = p->second.find(metric);
        if (m == p->second.end() || m->second.empty()) return std::nullopt;
        if (metric == "churn_errors") {  // a sum says more than a median here
            double sum = 0;
            for (double v : m->second) sum += v;
            return sum;
        }
        return median(m->second);
    }

    // Runs of the metric's test (bulk1, bulk8, rr, churn, idle) that failed for `party`.
    int failedRuns(const std::string& party, const std::string& metric) const {
        std::string test = metric.substr(0, metric.find('_'));
        auto p = table_.find(party);
        if (p == table_.end()) return 0;
        auto m = p->second.find(test + "_failed");
        return m == p->second.end() ? 0 : static_cast<int>(m->second.size());
    }

    std::string cell(const std::string& party, const MetricDef& def) const {
        auto v = value(party, def.key);
        int failed = failedRuns(party, def.key);
        if (!v) return failed ? "FAIL" : "—";
        return fixed(*v, def.decimals) + (failed ? " ⚠" : "");
    }

    bool anyFailure() const {
        for (const auto& [party, metrics] : table_)
            for (const auto& [metric, values] : metrics)
                if (metric.size() > 7 && metric.compare(metric.size() - 7, 7, "_failed") == 0)
                    return true;
        return false;
    }

    void printMedians(std::ostream& out) const {
        header(out, "metric (median of runs)", parties_);
        for (const auto& def : kMetrics) {
            bool any = false;
            for (const auto& p : parties_)
                any |= value(p, def.key).has_value() || failedRuns(p, def.key) > 0;
            if (!any) continue;
            out << "| " << def.label << " |";
            for (const auto& p : parties_) out << ' ' << cell(p, def) << " |";
            out << '\n';
        }
        if (anyFailure())
            out << "\nFAIL: every run of that test failed for that party; ⚠: some runs failed "
                   "and the value is the median of the others (idle: of what was held). The "
                   "notes below say what happened.\n";
    }

    void printRatios(std::ostream& out, const std::string& reference) const {
        if (std::find(parties_.begin(), parties_.end(), reference) == parties_.end()) return;
        std::vector<std::string> others;
        for (const auto& p : parties_)
            if (p != reference && p != "direct") others.push_back(p);
        if (others.empty()) return;
        out << "\n**Ratio to " << partyName(reference) << "** (party ÷ " << partyName(reference)
            << "; > 1 means more Gbit/s, req/s, conn/s — and more CPU, latency, RSS)\n\n";
        header(out, "metric", others);
        for (const auto& def : kMetrics) {
            if (!def.ratio) continue;
            if (def.relayOnly && reference == "direct") continue;
            auto ref = value(reference, def.key);
            if (!ref) continue;
            out << "| " << def.label << " |";
            for (const auto& p : others) {
                auto v = value(p, def.key);
                out << ' ' << (v && *ref > 0 ? fixed(*v / *ref, 2) + "×" : "—") << " |";
            }
            out << '\n';
        }
    }

    // The targets (issue 2, "Targets") for every splicegate party present.
    void printTargets(std::ostream& out) const {
        std::vector<std::string> engines;
        for (const auto& p : parties_)
            if (p.rfind("splicegate", 0) == 0 && !keepsACopy(p)) engines.push_back(p);
        if (engines.empty()) return;
        out << "\n**Targets** (issue 2; PASS/MISS from the medians above)\n\n";
        header(out, "target", engines);
        auto row = [&](const std::string& label, auto check) {
            std::vector<std::string> cells;
            bool any = false;
            for (const auto& e : engines) {
                cells.push_back(check(e));
                any |= cells.back() != "—";
            }
            if (!any) return;  // that test was not run
            out << "| " << label << " |";
            for (const auto& c : cells) out << ' ' << c << " |";
            out << '\n';
        };
        auto compare = [&](const std::string& e, const std::string& metric, const std::string& ref,
                           double factor, bool atLeast, int decimals) {
            auto v = value(e, metric);
            auto r = value(ref, metric);
            if (!v && failedRuns(e, metric)) return std::string("MISS (failed)");
            if (!v || !r) return std::string("—");
            double bound = *r * factor;
            bool pass = atLeast ? *v >= bound : *v <= bound;
            return std::string(pass ? "PASS" : "MISS") + " (" + fixed(*v, decimals) +
                   (atLeast ? " vs ≥ " : " vs ≤ ") + fixed(bound, decimals) + ")";
        };
        struct Target {
            const char* label;
            const char* metric;
            const char* reference;
            double factor;
            bool atLeast;
            int decimals;
        };
        static const Target kTargets[] = {
            {"(a) bulk 1 stream ≥ HAProxy splice", "bulk1_gbps", "haproxy-splice", 1, true, 2},
            {"(a) bulk 8 streams ≥ HAProxy splice", "bulk8_gbps", "haproxy-splice", 1, true, 2},
            {"(b) CPU/GiB 1 stream ≤ 0.8× HAProxy splice", "bulk1_cpu_gib", "haproxy-splice", 0.8,
             false, 3},
            {"(b) CPU/GiB 8 streams ≤ 0.8× HAProxy splice", "bulk8_cpu_gib", "haproxy-splice", 0.8,
             false, 3},
            {"(c) req/s ≥ HAProxy no-splice", "rr_rps", "haproxy-nosplice", 1, true, 0},
            {"(c) p99 ≤ HAProxy no-splice", "rr_p99_us", "haproxy-nosplice", 1, false, 1},
            {"(d) conn/s ≥ HAProxy no-splice", "churn_cps", "haproxy-nosplice", 1, true, 0},
        };
        for (const Target& t : kTargets) {
            row(t.label, [&](const std::string& e) {
                return compare(e, t.metric, t.reference, t.factor, t.atLeast, t.decimals);
            });
        }
        // The fd table shows every pipe the process holds, pooled ones included: with P pipes
        // more than before, at most P connections can hold one. None is a PASS; fewer than 1 %
        // of the connections is most likely the pool's idle stock (CHECK it with
        // splicegate_pipes{state}); more is a MISS.
        row("(e) no pipe held by idle connections", [&](const std::string& e) {
            auto held = value(e, "idle_pipes_held");
            auto before = value(e, "idle_pipes_before");
            auto conns = value(e, "idle_held");
            if (!held || !before || !conns) return std::string("—");
            if (failedRuns(e, "idle_held")) return std::string("MISS (failed)");
            double added = (*held - *before) / 2;  // two fds per pipe
            std::string verdict = added <= 0 ? "PASS" : added < *conns / 100 ? "CHECK" : "MISS";
            return verdict + " (" + fixed(std::max(added, 0.0), 0) + " pipes more than before, " +
                   fixed(*conns, 0) + " connections)";
        });
        row("(e) no thread added by idle connections", [&](const std::string& e) {
            auto held = value(e, "idle_threads_held");
            auto before = value(e, "idle_threads_before");
            if (!held || !before) return std::string("—");
            if (failedRuns(e, "idle_held")) return std::string("MISS (failed)");
            return std::string(*held <= *before ? "PASS" : "MISS") + " (" + fixed(*before, 0) +
                   " → " + fixed(*held, 0) + ")";
        });
        row("(e) RSS per idle connection ≤ 4 KiB", [&](const std::string& e) {
            auto v = value(e, "idle_rss_per_conn_b");
            if (!v) return std::string("—");
            if (failedRuns(e, "idle_held")) return std::string("MISS (failed)");
            return std::string(*v <= 4096 ? "PASS" : "MISS") + " (" + fixed(*v, 0) + " B)";
        });
    }

    // Issue 3's targets for every party that audits: against the same engine without audit,
    // HAProxy splice (which audits nothing) and HAProxy splice + tcpdump -w (a full copy too).
    void printAuditTargets(std::ostream& out) const {
        std::vector<std::string> auditing;
        for (const auto& p : parties_)
            if (keepsACopy(p)) auditing.push_back(p);
        if (auditing.empty()) return;
        out << "\n**Audit targets** (issue 3; PASS/MISS from the medians above)\n\n";
        header(out, "target", auditing);
        auto row = [&](const std::string& label, auto reference, const std::string& metric,
                       double factor, bool atLeast) {
            out << "| " << label << " |";
            for (const auto& p : auditing) {
                auto v = value(p, metric);
                auto r = value(reference(p), metric);
                std::string cell = "—";
                if (!v && failedRuns(p, metric)) cell = "MISS (failed)";
                if (v && r) {
                    double bound = *r * factor;
                    bool pass = atLeast ? *v >= bound : *v <= bound;
                    cell = std::string(pass ? "PASS" : "MISS") + " (" + fixed(*v, 3) +
                           (atLeast ? " vs ≥ " : " vs ≤ ") + fixed(bound, 3) + ")";
                }
                out << ' ' << cell << " |";
            }
            out << '\n';
        };
        auto same = [](const std::string& p) { return withoutAudit(p); };
        auto haproxy = [](const std::string&) { return std::string("haproxy-splice"); };
        auto tcpdump = [](const std::string&) { return std::string("haproxy-splice-tcpdump"); };
        for (const char* test : {"bulk1", "bulk8"}) {
            const std::string streams = std::string(test) == "bulk1" ? "1 stream" : "8 streams";
            const std::string gbps = std::string(test) + "_gbps";
            const std::string cpu = std::string(test) + "_cpu_gib";
            row("bulk " + streams + " ≥ 0.8× same engine without audit", same, gbps, 0.8, true);
            row("bulk " + streams + " ≥ 0.8× HAProxy splice", haproxy, gbps, 0.8, true);
            row("bulk " + streams + " > HAProxy splice + tcpdump", tcpdump, gbps, 1.0, true);
            row("CPU/GiB " + streams + " < HAProxy splice + tcpdump", tcpdump, cpu, 1.0, false);
        }
        row("churn ≥ 0.8× same engine without audit", same, "churn_cps", 0.8, true);
    }

    void printRaw(std::ostream& out) const {
        out << "\n**Every run** (values in run order)\n\n";
        header(out, "metric", parties_);
        for (const auto& def : kMetrics) {
            bool any = false;
            for (const auto& p : parties_)
                any |= value(p, def.key).has_value() || failedRuns(p, def.key) > 0;
            if (!any) continue;
            out << "| " << def.label << " |";
            for (const auto& p : parties_) {
                std::string cell;
                auto pt = table_.find(p);
                if (pt != table_.end()) {
                    auto m = pt->second.find(def.key);
                    if (m != pt->second.end())
                        for (double v : m->second)
                            cell += (cell.empty() ? "" : " / ") + fixed(v, def.decimals);
                }
                if (int failed = failedRuns(p, def.key)) {
                    std::ostringstream note;  // not string operator+: GCC 12 false -Wrestrict
                    note << (cell.empty() ? "" : " ") << '(' << failed << " failed)";
                    cell += note.str();
                }
                out << ' ' << (cell.empty() ? "—" : cell) << " |";
            }
            out << '\n';
        }
    }

  private:
    static void header(std::ostream& out, const std::string& first,
                       const std::vector<std::string>& columns) {
        out << "| " << first << " |";
        for (const auto& c : columns) out << ' ' << partyName(c) << " |";
        out << "\n|---|";
        for (std::size_t i = 0; i < columns.size(); ++i) out << "---:|";
        out << '\n';
    }

    Table table_;
    std::vector<std::string> parties_;
};

}  // namespace

int runReport(int argc, char** argv) {
    Options opts("report",
                 "Prints the markdown tables (medians, ratios, targets, every run) from run.sh's "
                 "raw file:\none 'RUN<TAB>PARTY<TAB>METRIC<TAB>VALUE' per line.",
                 {
                     {"raw", "FILE", "", "raw results file"},
                     {"parties", "LIST", "-", "comma-separated column order; - = order seen"},
                 },
                 argc, argv, 2);
    std::ifstream in(opts.str("raw"));
    if (!in) throw std::runtime_error("cannot read '" + opts.str("raw") + "'");
    Table table;
    std::vector<std::string> seen;
    std::string line;
    int lineNo = 0;
    while (std::getline(in, line)) {
        ++lineNo;
        if (line.empty() || line[0] == '#') continue;
        std::istringstream fields(line);
        std::string run, party, metric, valueText;
        if (!std::getline(fields, run, '\t') || !std::getline(fields, party, '\t') ||
            !std::getline(fields, metric, '\t') || !std::getline(fields, valueText, '\t'))
            throw std::runtime_error("raw line " + std::to_string(lineNo) + " is not 4 fields");
        char* end = nullptr;
        double value = std::strtod(valueText.c_str(), &end);
        if (valueText.empty() || *end != '\0' || !std::isfinite(value))
            throw std::runtime_error("raw line " + std::to_string(lineNo) + ": bad value '" +
                                     valueText + "'");
        table[party][metric].push_back(value);
        if (std::find(seen.begin(), seen.end(), party) == seen.end()) seen.push_back(party);
    }
    std::vector<std::string> parties;
    if (opts.str("parties") == "-") {
        parties = seen;
    } else {
        std::istringstream list(opts.str("parties"));
        std::string p;
        while (std::getline(list, p, ','))
            if (!p.empty()) parties.push_back(p);
    }
    Report report(std::move(table), parties);
    report.printMedians(std::cout);
    report.printRatios(std::cout, "direct");
    report.printRatios(std::cout, "haproxy-splice");
    report.printRatios(std::cout, "haproxy-nosplice");
    report.printTargets(std::cout);
    report.printAuditTargets(std::cout);
    report.printRaw(std::cout);
    return 0;
}

}  // namespace splicegate::bench
