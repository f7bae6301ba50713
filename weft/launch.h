// The launcher API behind weftrun: options, the environment contract, the rendezvous seam.
#pragma once

#include "weft/launch/job_token.h"
#include "weft/launch/launch_options.h"
#include "weft/launch/launcher.h"
#include "weft/launch/rendezvous.h"
#include "weft/launch/worker_env.h"
