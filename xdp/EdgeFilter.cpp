#include "xdp/EdgeFilter.h"

namespace splicegate {

EdgeFilter::EdgeFilter(const EdgeFilterOptions& options, UniqueFd handedLink,
                       XdpAttachMode handedMode) {
    // The interface first: a typo in the config is the likeliest failure and the clearest message.
    XdpAttachment::interfaceIndex(options.interface);
    program_ = std::make_unique<EdgeFilterProgram>();
    program_->setDropMalformed(options.dropMalformed);
    program_->setSynLimit(options.synLimit);
    program_->setListenPorts(options.listenPorts);
    for (const Cidr& cidr : options.deny) program_->addDeny(cidr);
    for (const Cidr& cidr : options.allow) program_->addAllow(cidr);
    // The rules are in before the program runs, attached anew or swapped onto the handed link.
    if (handedLink)
        attachment_ = XdpAttachment::adopt(options.interface, std::move(handedLink),
                                           program_->programFd(), handedMode);
    else
        attachment_ = XdpAttachment(options.interface, program_->programFd(), options.mode);
}

EdgeFilter::~EdgeFilter() = default;

}  // namespace splicegate
