// What a pipeline-parallel run reports (ParallelModel's report()): its stages and simulated
// bubble at the start, each rank's measured idle share at the end, and its last step's
// timeline as a picture.
#pragma once

#include <string>

#include "weft/parallel/device_mesh.h"
#include "weft/parallel/pipeline.h"

namespace weft::parallel {

// "pipeline parallel 2: 2 stages, 4 micro-batches; layers 0-1 (rank 0) ...; simulated bubble
// ..." and the schedule's timeline simulated with a backward taking two forwards' time.
std::string describe_pipeline_stages(const PipelineRuntime& pipeline);
// Every world rank's idle share, measured as simulate() defines it (1 - busy / makespan, the
// makespan of each step from the first start to the last end among the ranks of the rank's
// own pipeline: those whose coordinates differ in pp only), beside the schedule simulated with
// each pipeline rank's mean measured F, B, I and W times (averaged over the ranks that share
// its stages). Collective over the world; the text is the same on every rank.
std::string describe_pipeline_idle(const PipelineRuntime& pipeline, const DeviceMesh& mesh);
// The latest step of the pipeline that holds world rank 0 as it ran: an SVG document
// (pipeline_picture.h's picture, each action where it computed, on the steady clock that the
// ranks of one host share), titled with `schedule_name`; empty before a step has run.
// Collective over the world.
std::string pipeline_timeline_svg(const PipelineRuntime& pipeline, const DeviceMesh& mesh,
                                  const std::string& schedule_name);

}  // namespace weft::parallel
