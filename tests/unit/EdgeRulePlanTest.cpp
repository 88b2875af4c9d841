// The reload's plan for the edge filter's rules (relay/EdgeRulePlan.h): what it removes and adds,
// that admin rules stay and count, and that a set over its map's capacity is named before
// anything changes.
#include <gtest/gtest.h>

#include "common/Error.h"
#include "relay/EdgeRulePlan.h"

namespace splicegate {
namespace {

Cidr cidr(const char* text) { return Cidr::parseOrThrow(text); }

TEST(EdgeRulePlan, RemovesWhatTheOldConfigHadAndAddsWhatTheNewOneHas) {
    std::vector<std::pair<Cidr, bool>> inForce{{cidr("198.18.0.0/24"), false},
                                               {cidr("198.18.1.0/24"), false},
                                               {cidr("fd00::/64"), true}};
    auto plan = EdgeRulePlan::make(inForce, {"198.18.0.0/24", "198.18.1.0/24"}, {"fd00::/64"},
                                   {"198.18.1.0/24", "198.18.2.0/24"}, {});
    EXPECT_EQ(plan.removeDeny, std::vector<Cidr>{cidr("198.18.0.0/24")});
    EXPECT_EQ(plan.addDeny, std::vector<Cidr>{cidr("198.18.2.0/24")});
    EXPECT_EQ(plan.removeAllow, std::vector<Cidr>{cidr("fd00::/64")});
    EXPECT_TRUE(plan.addAllow.empty());
    EXPECT_EQ(plan.after[0], 2u);  // deny IPv4
    EXPECT_EQ(plan.after[1], 0u);
    EXPECT_EQ(plan.after[2], 0u);
    EXPECT_EQ(plan.after[3], 0u);  // allow IPv6
    EXPECT_FALSE(plan.overflow(2));
}

TEST(EdgeRulePlan, AdminRulesStayAndCountTowardsTheCapacity) {
    // 198.18.9.0/24 came from the admin: no configuration names it, so no reload removes it.
    std::vector<std::pair<Cidr, bool>> inForce{{cidr("198.18.9.0/24"), false}};
    auto plan = EdgeRulePlan::make(inForce, {}, {}, {"198.18.0.0/24", "198.18.1.0/24"}, {});
    EXPECT_TRUE(plan.removeDeny.empty());
    EXPECT_EQ(plan.after[0], 3u);
    auto problem = plan.overflow(2);
    ASSERT_TRUE(problem);
    EXPECT_NE(problem->find("3 deny IPv4 prefixes"), std::string::npos) << *problem;
    EXPECT_NE(problem->find("at most 2"), std::string::npos) << *problem;
    EXPECT_FALSE(plan.overflow(3));
}

TEST(EdgeRulePlan, TwoSpellingsOfOnePrefixAreOneRule) {
    std::vector<std::pair<Cidr, bool>> inForce{{cidr("198.18.0.0/16"), false}};
    auto plan = EdgeRulePlan::make(inForce, {"198.18.0.0/16"}, {}, {"198.18.7.1/16"}, {});
    EXPECT_TRUE(plan.removeDeny.empty());
    EXPECT_TRUE(plan.addDeny.empty());
    EXPECT_EQ(plan.after[0], 1u);
}

TEST(EdgeRulePlan, AMalformedPrefixIsNamedBeforeAnythingIsPlanned) {
    try {
        EdgeRulePlan::make({}, {}, {}, {"198.18.0.0/40"}, {});
        FAIL() << "a /40 IPv4 prefix was planned";
    } catch (const UsageError& error) {
        EXPECT_NE(std::string(error.what()).find("198.18.0.0/40"), std::string::npos)
            << error.what();
    }
}

}  // namespace
}  // namespace splicegate
