// check_mpi: turns an MPI error code into a PeerError naming the call and MPI's own text.
// Shared by the mpi backend's transport and engine. Not public.
#pragma once

#include <mpi.h>

#include <string>

#include "weft/dist/errors.h"

namespace weft::dist {

inline void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = "";
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw PeerError(std::string("mpi: ") + what + " failed: " + text);
}

}  // namespace weft::dist
