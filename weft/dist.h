// The collectives API: process groups, buffers, reduce ops, Work, and the backends' entry
// points. Namespace weft::dist.
#pragma once

#include "weft/dist/buffer.h"
#include "weft/dist/errors.h"
#include "weft/dist/init.h"
#include "weft/dist/launch_env.h"
#include "weft/dist/process_group.h"
#include "weft/dist/reduce_op.h"
#include "weft/dist/run_threads.h"
#include "weft/dist/shared_buffer.h"
#include "weft/dist/work.h"
