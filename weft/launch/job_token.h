// The job token: a shared secret every process of one job presents to the job's store, so
// that a worker of another job (or anyone else on the network) is turned away.
#pragma once

#include <optional>
#include <string>

namespace weft::launch {

// The token for a job: `flag` (--token) if given, else `env_value` (WEFT_JOB_TOKEN) if
// non-null and non-empty, else, for a single-node job, a fresh random_job_token(). Throws
// weft::InvalidArgument for an empty --token, and when a multi-node job (nnodes > 1) has
// neither: every node must present the same token, so it cannot be made up here.
std::string resolve_job_token(const std::optional<std::string>& flag, const char* env_value,
                              int nnodes);

// 128 random bits from the kernel (getrandom, or /dev/urandom), as 32 lowercase hex
// digits. Never blocks. Throws weft::SystemError if no randomness can be read.
std::string random_job_token();

}  // namespace weft::launch
