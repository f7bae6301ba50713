// The executor API: thread and process pools, futures, map, wait and as_completed.
#pragma once

#include "weft/exec/future.h"
#include "weft/exec/map.h"
#include "weft/exec/process_pool.h"
#include "weft/exec/thread_pool.h"
#include "weft/exec/wait.h"
