// TCPStore's wire format, shared by the client (tcp_store.cc) and the server
// (tcp_store_server.cc). Documented in docs/STORES.md; keep the two in step. Not public.
//
// Frame: a 16-byte little-endian header, then `length` payload bytes.
//   offset 0  u32 magic    kMagic ("WFTS")
//   offset 4  u16 version  kVersion
//   offset 6  u16 type     MsgType
//   offset 8  u32 length   payload bytes, at most kMaxRecordBytes
//   offset 12 u32 crc32    CRC-32 of the payload
// Payload fields: u32 and i64 little-endian; a string is a u32 length then its bytes; a key
// list is a u32 count then that many strings.
//
// A connection opens with the job-token proof of weft/net/auth.h, in frames:
//   client kHello(str nonce_c) -> server kChallenge(str nonce_s, str server MAC)
//   client kProof(str client MAC) -> server kOk, or kError(kWrongToken) and close.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/base/error.h"
#include "weft/net/socket.h"

namespace weft::store::internal {

inline constexpr std::uint32_t kMagic = 0x53544657;  // "WFTS" read as a little-endian u32
inline constexpr std::uint16_t kVersion = 2;
inline constexpr std::size_t kHeaderBytes = 16;

enum class MsgType : std::uint16_t {
  // Requests (client to server); payloads in docs/STORES.md.
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCompareSet = 5,
  kWait = 6,
  kCheck = 7,
  kDeleteKey = 8,
  kNumKeys = 9,
  kProof = 10,  // the client's half of the token proof, after kChallenge
  // Replies (server to client).
  kOk = 100,
  kValue = 101,
  kInt = 102,
  kTimeout = 103,
  kError = 104,
  kChallenge = 105,  // the server's nonce and its half of the token proof, after kHello
};

// What the token proofs (weft/net/auth.h) are bound to on a store connection.
inline constexpr std::string_view kAuthContext = "weft TCPStore v2";

// The code an kError reply carries. Codes below kInvalidArgument close the connection.
enum class ErrorCode : std::uint32_t {
  kMalformed = 1,          // bad magic, unknown type, short or trailing payload, bad checksum
  kTooLarge = 2,           // length above kMaxRecordBytes
  kBadVersion = 3,         // a version this server does not speak
  kWrongToken = 4,         // the hello's job token does not match the server's
  kHelloExpected = 5,      // a request before the hello and the token proof
  kInvalidArgument = 100,  // the request was well formed but its operation failed (add on text)
};

// A frame that breaks the format; `code` says how, for the kError reply.
class ProtocolError : public weft::Error {
 public:
  ProtocolError(ErrorCode code, const std::string& what) : weft::Error(what), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

struct FrameHeader {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  MsgType type = MsgType::kOk;
  std::uint32_t length = 0;
  std::uint32_t crc = 0;
};

// Header + payload, ready to send. Precondition: payload.size() <= kMaxRecordBytes.
std::string encode_frame(MsgType type, std::string_view payload);
// Decodes the first kHeaderBytes of `bytes` and checks magic, version and length (not the
// type: the receiver knows which types it accepts). Throws ProtocolError.
FrameHeader decode_header(std::string_view bytes);
// Throws ProtocolError(kMalformed) if `payload` does not match the header's checksum.
void check_crc(const FrameHeader& header, std::string_view payload);

struct Frame {
  MsgType type;
  std::string payload;
};
// Blocking I/O for the client: the whole frame or net::ConnectionClosed/weft::TimeoutError
// (and ProtocolError for a malformed reply).
void send_frame(net::Socket& socket, MsgType type, std::string_view payload, Deadline deadline);
Frame recv_frame(net::Socket& socket, Deadline deadline);

class PayloadWriter {
 public:
  PayloadWriter& u32(std::uint32_t v);
  PayloadWriter& i64(std::int64_t v);
  PayloadWriter& str(std::string_view s);
  PayloadWriter& bytes(std::span<const std::byte> b);  // as a str
  PayloadWriter& keys(const std::vector<std::string>& keys);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads fields in order; every length is checked against the bytes left before anything
// is allocated. Throws ProtocolError(kMalformed) on a short payload or, in finish(), on
// trailing bytes.
class PayloadReader {
 public:
  explicit PayloadReader(std::string_view payload) : rest_(payload) {}
  std::uint32_t u32();
  std::int64_t i64();
  std::string str();
  // A str of exactly out.size() bytes, copied into out.
  void bytes(std::span<std::byte> out);
  std::vector<std::string> keys();
  void finish() const;

 private:
  std::string_view take(std::size_t n);
  std::string_view rest_;
};

}  // namespace weft::store::internal
