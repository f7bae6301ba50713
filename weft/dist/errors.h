// Errors of the collectives layer, all rooted at weft::Error (see weft/base/error.h).
//
//   dist::InvalidArgument    the call is wrong on this rank (root, sizes, dtype/op); nothing
//                            was communicated; fix the call
//   dist::TimeoutError       peers did not take part in time; the message names the op, its
//                            sequence number, the group and the ranks that had not arrived
//   dist::PeerError          a peer failed, closed its connection or died
//   dist::CollectiveMismatch ranks called different collectives (WEFT_DIST_DEBUG=detail)
//   dist::GroupBroken        an earlier failure left this group unusable; make a new one
#pragma once

#include "weft/base/error.h"

namespace weft::dist {

class InvalidArgument : public weft::InvalidArgument {
 public:
  using weft::InvalidArgument::InvalidArgument;
};

class TimeoutError : public weft::TimeoutError {
 public:
  using weft::TimeoutError::TimeoutError;
};

class PeerError : public weft::Error {
 public:
  using weft::Error::Error;
};

class CollectiveMismatch : public weft::Error {
 public:
  using weft::Error::Error;
};

class GroupBroken : public weft::Error {
 public:
  using weft::Error::Error;
};

}  // namespace weft::dist
