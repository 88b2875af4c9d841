#include "metrics/HttpServer.h"

#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <stdexcept>

#include "common/Error.h"
#include "common/Log.h"
#include "common/UniqueFd.h"

namespace splicegate {

namespace {

// libmicrohttpd reports why it cannot start (and later, why it drops a connection) through its
// logger. While the constructor starts the daemon those messages are collected for the
// exception; later ones are logged.
thread_local std::string* startupMessages = nullptr;

void mhdLog(void*, const char* format, va_list args) {
    char line[512];
    std::vsnprintf(line, sizeof line, format, args);
    std::string message(line);
    while (!message.empty() && (message.back() == '\n' || message.back() == '.'))
        message.pop_back();
    if (startupMessages != nullptr) {
        if (!startupMessages->empty()) *startupMessages += "; ";
        *startupMessages += message;
    } else {
        logWarn("metrics endpoint: ", message);
    }
}

// After libmicrohttpd failed to start: the errno of binding the same address ourselves, 0 if
// that works (then the failure was something else, named by its log).
int probeBindErrno(const SocketAddress& address) noexcept {
    UniqueFd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return errno;
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (address.family() == AF_INET6)
        ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    return ::bind(fd.get(), address.get(), address.length()) == 0 ? 0 : errno;
}

MHD_Result queue(MHD_Connection* connection, const HttpResponse& answer) {
    auto* response = MHD_create_response_from_buffer(
        answer.body.size(), const_cast<char*>(answer.body.data()), MHD_RESPMEM_MUST_COPY);
    if (response == nullptr) return MHD_NO;  // out of memory: libmicrohttpd closes the connection
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, answer.contentType.c_str());
    if (answer.status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    auto result = MHD_queue_response(connection, answer.status, response);
    MHD_destroy_response(response);
    return result;
}

MHD_Result onRequest(void* handler, MHD_Connection* connection, const char* url, const char* method,
                     const char*, const char*, size_t* uploadSize, void**) {
    std::string_view verb(method);
    if (verb != MHD_HTTP_METHOD_GET && verb != MHD_HTTP_METHOD_HEAD) {
        // A request body is not read: the answer is the same whatever it holds.
        *uploadSize = 0;
        return queue(connection, {MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8",
                                  "only GET and HEAD\n"});
    }
    HttpResponse answer;
    // Nothing may unwind into libmicrohttpd's C frames.
    try {
        answer = (*static_cast<const HttpHandler*>(handler))(verb, url);
    } catch (const std::exception& error) {
        logWarn("metrics endpoint: ", url, ": ", error.what());
        answer = {MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", "internal error\n"};
    } catch (...) {
        logWarn("metrics endpoint: ", url, ": unknown error");
        answer = {MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", "internal error\n"};
    }
    return queue(connection, answer);
}

}  // namespace

HttpServer::HttpServer(const SocketAddress& address, HttpHandler handler, HttpServerLimits limits,
                       int adopted)
    : handler_(std::move(handler)) {
    // IPv6 without MHD_USE_DUAL_STACK: the socket is IPV6_V6ONLY, so "[::]:PORT" is IPv6 only,
    // exactly as the relay's own "[::]" listeners.
    // MHD_USE_ITC: what MHD_quiesce_daemon needs with a thread pool (stopAccepting).
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (address.family() == AF_INET6) flags |= MHD_USE_IPv6;
    std::string messages;
    startupMessages = &messages;
    // An adopted socket is already bound and listening: MHD_OPTION_LISTEN_SOCKET takes it over
    // (and closes it with the daemon).
    if (adopted >= 0)
        daemon_ = MHD_start_daemon(
            flags, 0, nullptr, nullptr, &onRequest, &handler_, MHD_OPTION_LISTEN_SOCKET,
            static_cast<MHD_socket>(adopted), MHD_OPTION_EXTERNAL_LOGGER, &mhdLog, nullptr,
            MHD_OPTION_THREAD_POOL_SIZE, limits.threads, MHD_OPTION_CONNECTION_LIMIT,
            limits.maxConnections, MHD_OPTION_CONNECTION_TIMEOUT,
            static_cast<unsigned>(limits.requestTimeout.count()), MHD_OPTION_END);
    else
        daemon_ = MHD_start_daemon(
            flags, 0, nullptr, nullptr, &onRequest, &handler_, MHD_OPTION_SOCK_ADDR,
            address.get(), MHD_OPTION_EXTERNAL_LOGGER, &mhdLog, nullptr,
            MHD_OPTION_THREAD_POOL_SIZE, limits.threads, MHD_OPTION_CONNECTION_LIMIT,
            limits.maxConnections, MHD_OPTION_CONNECTION_TIMEOUT,
            static_cast<unsigned>(limits.requestTimeout.count()), MHD_OPTION_END);
    startupMessages = nullptr;
    auto text = address.toString();
    if (daemon_ == nullptr) {
        if (int err = probeBindErrno(address); err != 0)
            throwErrno(err, concat("metrics endpoint: cannot listen on ", text));
        throw std::runtime_error(concat("metrics endpoint: cannot listen on ", text, ": ",
                                        messages.empty() ? "libmicrohttpd failed" : messages));
    }
    const auto* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
    port_ = info != nullptr && info->port != 0 ? info->port : address.port();
}

int HttpServer::listenFd() const noexcept {
    if (quiesced_) return -1;
    const auto* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_LISTEN_FD);
    return info != nullptr ? info->listen_fd : -1;
}

void HttpServer::stopAccepting() noexcept {
    if (quiesced_) return;
    quiesced_ = true;
    // MHD hands the socket back; this process's copy closes, the new process's stays.
    MHD_socket fd = MHD_quiesce_daemon(daemon_);
    if (fd != MHD_INVALID_SOCKET) ::close(fd);
}

HttpServer::~HttpServer() {
    // The listener first, by a close of our descriptor only: MHD_stop_daemon would shut the
    // socket down, which stops it listening in every process that holds it (an upgrade's new
    // process that fails after it adopted the socket would take it from the old one).
    stopAccepting();
    // Closes every connection and joins the pool's threads: after this the handler never runs
    // again.
    MHD_stop_daemon(daemon_);
}

}  // namespace splicegate
