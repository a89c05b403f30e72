#include "server/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <csignal>
#include <thread>
#include <vector>

#include "base/check.h"
#include "engine/log.h"

namespace dsv4::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using net::ip::tcp;
using namespace net::experimental::awaitable_operators;
constexpr auto kTuple = net::as_tuple(net::use_awaitable);

struct HttpServer::Impl {
  ApiService& service;
  HttpServerOptions options;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::atomic<int64_t> active{0};  // requests between read and the end of their response
  std::atomic<bool> stopping{false};

  Impl(ApiService& s, HttpServerOptions o) : service(s), options(std::move(o)) {}

  net::awaitable<void> accept_loop();
  net::awaitable<void> session(tcp::socket socket);
  net::awaitable<bool> respond(beast::tcp_stream& stream, HttpReply reply, unsigned version, bool keep_alive);
  net::awaitable<void> drain_then_stop();
};

namespace {

// True when the peer closed the connection (EOF or error); false when data is waiting.
bool peer_closed(tcp::socket& s) {
  char c;
  const ssize_t n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK;
}

http::response<http::string_body> make_response(const HttpReply& reply, int status, std::string body, unsigned version,
                                                 bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(status), version};
  res.set(http::field::server, "dsv4");
  res.set(http::field::content_type, reply.content_type);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

}  // namespace

net::awaitable<void> HttpServer::Impl::accept_loop() {
  while (!stopping.load()) {
    auto [ec, socket] = co_await acceptor.async_accept(net::make_strand(ioc), kTuple);
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      continue;
    }
    socket.set_option(tcp::no_delay(true));
    auto exec = socket.get_executor();
    net::co_spawn(exec, session(std::move(socket)), net::detached);
  }
}

net::awaitable<void> HttpServer::Impl::session(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  while (true) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(static_cast<uint64_t>(service.options().max_body_bytes));
    parser.header_limit(64 * 1024);
    stream.expires_after(std::chrono::seconds(options.idle_timeout_s));
    auto [ec, n] = co_await http::async_read(stream, buffer, parser, kTuple);
    if (ec == http::error::body_limit) {
      ApiError e{413, "The request body exceeds " + std::to_string(service.options().max_body_bytes) + " bytes",
                 "invalid_request_error", "", "request_too_large"};
      HttpReply r{413, "application/json", error_json(e), nullptr};
      auto res = make_response(r, 413, r.body, 11, false);
      service.count_response(413);
      co_await http::async_write(stream, res, kTuple);
      break;
    }
    if (ec) {
      if (ec != http::error::end_of_stream && ec != beast::error::timeout && ec != net::error::connection_reset &&
          ec != net::error::eof) {
        HttpReply r{400, "application/json",
                    error_json({400, "Malformed HTTP request: " + ec.message(), "invalid_request_error", "", ""}), nullptr};
        auto res = make_response(r, 400, r.body, 11, false);
        co_await http::async_write(stream, res, kTuple);
      }
      break;
    }
    stream.expires_never();
    http::request<http::string_body> req = parser.release();
    HttpRequest request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    request.authorization = std::string(req[http::field::authorization]);
    request.body = std::move(req.body());
    const bool keep_alive = req.keep_alive();
    active.fetch_add(1);
    HttpReply reply;
    try {
      reply = service.handle(request);
    } catch (const std::exception& e) {
      reply = HttpReply{500, "application/json",
                        error_json({500, std::string("internal error: ") + e.what(), "internal_server_error", "", ""}),
                        nullptr};
    }
    const bool ok = co_await respond(stream, std::move(reply), req.version(), keep_alive);
    active.fetch_sub(1);
    if (!ok || !keep_alive) break;
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

// Writes one reply; false when the connection must be closed.
net::awaitable<bool> HttpServer::Impl::respond(beast::tcp_stream& stream, HttpReply reply, unsigned version,
                                               bool keep_alive) {
  if (!reply.stream) {
    service.count_response(reply.status);
    auto res = make_response(reply, reply.status, std::move(reply.body), version, keep_alive);
    auto [ec, n] = co_await http::async_write(stream, res, kTuple);
    co_return !ec;
  }
  std::shared_ptr<ResponseStream> rs = reply.stream;
  auto exec = co_await net::this_coro::executor;
  auto timer = std::make_shared<net::steady_timer>(exec);
  rs->set_notify([timer, exec] { net::post(exec, [timer] { timer->cancel(); }); });
  tcp::socket& sock = stream.socket();
  bool watch_socket = true;
  bool peer_gone = false;
  // Waits for new output or for the peer to go away.
  auto wait = [&]() -> net::awaitable<void> {
    timer->expires_after(std::chrono::milliseconds(500));
    if (!watch_socket) {
      co_await timer->async_wait(kTuple);
      co_return;
    }
    auto r = co_await (timer->async_wait(kTuple) || sock.async_wait(tcp::socket::wait_read, kTuple));
    if (r.index() == 1) {
      if (peer_closed(sock)) peer_gone = true;
      else watch_socket = false;  // a pipelined request: read it after this response
    }
  };

  if (!rs->streaming()) {
    std::string body;
    while (!rs->take(body)) {
      co_await wait();
      if (peer_gone) {
        rs->cancel();
        co_return false;
      }
    }
    const int status = rs->status();
    service.count_response(status);
    auto res = make_response(reply, status, std::move(body), version, keep_alive);
    auto [ec, n] = co_await http::async_write(stream, res, kTuple);
    co_return !ec;
  }

  http::response<http::empty_body> head{http::status::ok, version};
  head.set(http::field::server, "dsv4");
  head.set(http::field::content_type, "text/event-stream");
  head.set(http::field::cache_control, "no-cache");
  head.keep_alive(keep_alive);
  head.chunked(true);
  http::response_serializer<http::empty_body> sr{head};
  service.count_response(200);
  if (auto [ec, n] = co_await http::async_write_header(stream, sr, kTuple); ec) {
    rs->cancel();
    co_return false;
  }
  while (true) {
    std::string out;
    const bool done = rs->take(out);
    if (!out.empty()) {
      auto [ec, n] = co_await net::async_write(stream, http::make_chunk(net::buffer(out)), kTuple);
      if (ec) {
        rs->cancel();
        co_return false;
      }
    }
    if (done) break;
    co_await wait();
    if (peer_gone) {
      rs->cancel();
      co_return false;
    }
  }
  auto [ec, n] = co_await net::async_write(stream, http::make_chunk_last(), kTuple);
  co_return !ec;
}

net::awaitable<void> HttpServer::Impl::drain_then_stop() {
  net::steady_timer t(co_await net::this_coro::executor);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.drain_timeout_s);
  while ((service.num_inflight() > 0 || active.load() > 0) && std::chrono::steady_clock::now() < deadline) {
    t.expires_after(std::chrono::milliseconds(10));
    co_await t.async_wait(kTuple);
  }
  engine::log::info(str_cat("Drain complete (", service.num_inflight(), " requests left); shutting down"));
  stopping.store(true);
  beast::error_code ignored;
  acceptor.close(ignored);
  ioc.stop();
}

HttpServer::HttpServer(ApiService& service, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(service, std::move(options))) {}

HttpServer::~HttpServer() = default;

void HttpServer::listen() {
  auto& a = impl_->acceptor;
  const std::string& host = impl_->options.host;
  const uint16_t port = impl_->options.port;
  tcp::endpoint ep;
  try {
    tcp::resolver resolver(impl_->ioc);
    auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive);
    DSV4_CHECK(!results.empty(), "cannot resolve host '", host, "'");
    ep = results.begin()->endpoint();
  } catch (const boost::system::system_error& e) {
    DSV4_FAIL("cannot resolve --host '", host, "': ", e.what());
  }
  boost::system::error_code ec;
  a.open(ep.protocol(), ec);
  DSV4_CHECK(!ec, "cannot open a socket: ", ec.message());
  a.set_option(net::socket_base::reuse_address(true), ec);
  a.bind(ep, ec);
  if (ec == net::error::address_in_use) {
    DSV4_FAIL("port ", port, " on ", host, " is already in use; pick another with --port");
  }
  DSV4_CHECK(!ec, "cannot bind ", host, ":", port, ": ", ec.message());
  a.listen(net::socket_base::max_listen_connections, ec);
  DSV4_CHECK(!ec, "cannot listen on ", host, ":", port, ": ", ec.message());
}

uint16_t HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::run(std::function<void(int)> on_signal) {
  Impl& s = *impl_;
  net::signal_set signals(s.ioc, SIGINT, SIGTERM);
  signals.async_wait([this, on_signal](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (on_signal) on_signal(sig);
    impl_->service.begin_drain();
    net::co_spawn(impl_->ioc, impl_->drain_then_stop(), net::detached);
  });
  net::co_spawn(s.ioc, s.accept_loop(), net::detached);
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, s.options.num_threads); ++i) threads.emplace_back([&] { s.ioc.run(); });
  s.ioc.run();
  for (auto& t : threads) t.join();
  boost::system::error_code ignored;
  signals.cancel(ignored);
}

void HttpServer::stop() {
  impl_->stopping.store(true);
  net::post(impl_->ioc, [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->ioc.stop();
  });
}

}  // namespace dsv4::server
