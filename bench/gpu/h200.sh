#!/usr/bin/env bash
# Runs trtpool's GPU tests and benchmarks on the lent H200 (no network there).
# The wheels it carries come from bench/gpu/fetch_wheels.sh (.whl_big/, .whl/).
# Stages, in order, each given as an argument:
#   stash     keep the nvidia-pytriton wheel (.whl_big/) under $HOME/wh for later calls
#   stash-gpu keep nvImageCodec and nvJPEG (.whl_gpu/) under $HOME/wh-gpu; `setup` installs them
#   setup     a serving venv with the carried wheels (.whl/pip), then scripts/setup.sh offline
#   tests     the gpu-marked tests (torch runtime in-process, cuda.py, GPU request tensors, served GPU instances)
#   inprocess bench/inprocess.py for resnet50 and bert_base, fp16, contexts 1,2,4,8 x batch 1,8,32
#   serving   bench/gpu_serving.py (perf_analyzer throughput, latency at 50/90% of peak)
#   pool      saturation points with the default and a 2 GiB CUDA memory pool
#   contexts  4 contexts against 1 at batch 1, each mode against itself (sync c1/c4,
#             decoupled c1_dec/c4_dec), ResNet-50 and BERT-base, one server run each
#   breakdown served saturation points with Triton's per-stage statistics, beside the
#             in-process figures at the same contexts and batches, ResNet-50 and BERT-base
#   memory    section 3 for both examples, each model's default profile: after load, after
#             batch-1 clients at the served shape, after the profile's largest batch and shapes
#   bert-grpc BERT-base served over plain gRPC beside CUDA shm (batch-1/8/32 clients)
#   tail      BERT p50/p99 at 50/90% of peak: metrics flushed every second vs after every batch
#   sync-plain  served GPU tests and ResNet-50 sync saturation points after execute became a plain call
#   memory-small  section 3 with BERT capped at 8 x 128 tokens
#   bert      BERT-base served through tritonserver (CUDA shm)
#   saturation  batch-1 clients at concurrency 64, batch-8/32 clients at 16 and 32 (CUDA shm)
#   decoupled-recheck  the saturation stage's decoupled ResNet rows at 16 clients, after the
#             fix that copies GPU request tensors before execute returns
#   decoder-hw  (after stash-gpu) bench/gpu_decode.py for torchvision, nvImageCodec and its hardware
#             decoder alone; then (f) at 2 and 4 threads with torchvision, nvImageCodec's hardware
#             decoder (HW_GPU_ONLY) and its CUDA decoder (GPU_ONLY) -> gpu_decode.json, engine_host_ceiling_*.json
#   profile-waits  (f) at 4 and 8 threads with every thread's samples, waits included; then the
#             engine host under ResNet-50 gRPC (64 clients) and JPEG (256) load: its GIL holder, its
#             threads' waits and one front stub's -> ceiling_waits.txt, host_gil_*.txt, waits_*_{host,stub}.txt
#   ceiling   bench/ceiling.py: one instance (sync, pipelined) against the in-process best and
#             the null model's ceiling, one run; a py-spy profile of the best pipelined stub
#   ceiling-final  the same for sync and pipelined with 1, 2 and 4 contexts, no profile
#   elastic   bench/elastic.py: BERT-base (sequence 128) batch-1 clients 1 -> 16 -> 1 on an elastic
#             pool of 1..4 contexts (context count, GPU memory, answers/s every second), then
#             beside a fixed pool of 4 in perf_analyzer rounds (ABBA); writes elastic.json
#   host-path bench/host_path.py (issue 23), one run: in-process batch 32 with host inputs at
#             1/2/4 contexts; sync 1 ctx, pipelined 2 and 4 ctx and the null model served to
#             batch-32 clients over system shm and batch-1 clients over plain gRPC, the same
#             variants over CUDA shm beside them; Triton's per-stage times on every point; a
#             py-spy profile (native frames) of the best system-shm stub -> host_path.json,
#             host_path_profile.txt
#   cuda-shm-ab  bench/code_ab.py (issue 23): this code against an earlier revision, served in
#             turn (ABBA, 2 rounds), batch-32 clients over CUDA shm, pipelined 2 contexts. The
#             earlier code travels in .whl/ (carried): before the call, here,
#             mkdir -p .whl/base-REV && git archive REV backend_src/trtpool | tar -x -C .whl/base-REV
#             -> cuda_shm_ab.json
#   host-path-inprocess, host-path-served  the same in two calls on one warm machine (the in-process
#             section first; the whole stage did not fit one 10-minute call on 2026-12-03)
#   host-copies  bench/host_copies.py (issue 23): a batch of 32 host images into the device,
#             gathered in one piece vs in slices, and (issue 36) by DMA from a page-locked slab in place,
#             by CUDA events; submit/complete through the torch runtime -> host_copies.json
#   memory-breakdown  bench/memory_breakdown.py (issue 21): where one instance's GPU memory goes,
#             step by step (CUDA context, weights, each context, graphs at the served shapes and at
#             the largest), BERT-base and ResNet-50, 4 contexts -> memory_breakdown_*.json
#   decode    bench/gpu_decode.py (issue 28): the GPU decoder chosen by measurement: torchvision's
#             nvJPEG, nvImageCodec (all back-ends, hardware only, CUDA only), Pillow on one core;
#             decode and whole-crop images/s at batches 1-64, 1 and 4 threads; grey levels
#             from the CPU path -> gpu_decode.json
#   gpu-pipeline-tests  tests/gpu/test_gpu_pipeline.py (issue 28) -> gpu_pipeline_tests.log
#   pipeline-gpu  bench/pipeline.py --gpu-variants (issue 28): (a) in-process GPU decode (pipelined;
#             sync; sync with 2 instances; sync on the torch-less path), (b)
#             in-process Pillow in 8 processes, (c) CPU ensemble, (d) GPU-decode ensemble, (e) the
#             null JPEG model; perf_analyzer at 1, 16, 64, 256 -> pipeline.json
#   pipeline-gpu-rerun  the same for the variants whose queue delay was 20 ms in the 03:19 UTC run, 64 and 256
#   pipeline  bench/pipeline.py: JPEG in, top-5 labels out, ResNet-50 224 fp16 on the torch runtime:
#             process.py in the instance vs a Triton ensemble (Python-backend pre/post) vs
#             clients that preprocess themselves; batch-1 clients at 1, 16, 64, 4 client processes;
#             the in-process model's preprocess in 8 worker processes (the 16:34 UTC 2026-12-03 run,
#             on threads, was 0.63x of the ensemble)
#   pipeline-probe  where (a)'s time goes (issue 28, 2026-12-04 second session): sync with 1-4
#             instances beside the null model at 64 and 256 clients, then a py-spy profile (samples
#             holding the GIL) of the one-instance stub at 64 clients -> pipeline_probe.json,
#             pipeline_probe_profile.txt
#   pipeline-final  issue 28's record after pipeline-probe: (a) sync with 4 and 6 instances (the
#             device postprocess on), (b)-(e), perf_analyzer at 1, 16, 64, 256 -> pipeline.json
#   pipeline-one-client  the 1-client figures pipeline-final could not get (perf_analyzer unstable in 5
#             windows of 1.5 s): (a) sync with 4 instances, (d) and (e), windows of 4 s -> pipeline_one_client.json
#   device-tests  the device-postprocess tests and the GPU pipeline tests -> gpu_pipeline_tests.log
#   tune-resnet50  bench/tune.py (issue 30), one case a call: trtpool-tune against the exhaustive grid of
#             the same small space (sync/pipelined x 1,2,4 contexts = 6 points, all measured), ResNet-50 224
#             batch-1 gRPC clients, fp16 torch runtime; the search (and its elastic step), the grid's best and
#             the search's choice side by side (ABBA, 2 rounds), and the p99-bound search with its choice
#             measured again. Sized from the 2026-12-04 run's points (18-25 s each, mostly server start and
#             model load; every one then needed a second perf_analyzer pass at 500 ms windows, so the windows
#             are 1,000 ms and 60% from the start): about 16 s a point, 7 points at most per search, 3 tunes
#             (about 12 s of load each before measuring), about 450 s expected. --budget 2.7 min a tune run
#             fits the 6-point grid at 25 s a point. SIGINT at 570 s is a safety net only: trtpool-tune then
#             stops its servers and what finished is written. Writes $OUT/tune_resnet50.json, merges it into
#             /tmp/tune_h200.json on the machine and copies that to $OUT/tune.json.
#   tune-bert the same for BERT-base (sequence 128) batch-32 CUDA-shm clients, no p99 run; --budget 3.5 min a
#             tune run (BERT loads slower); about 400 s expected. Its $OUT/tune.json holds both cases where
#             tune-resnet50 ran on the same warm machine; otherwise merge the two here:
#             python3 bench/tune.py --merge tune_resnet50.json tune_bert.json --merge-into bench/results/h200/tune.json
#             (the former one-call `tune` stage ran out of its 350 s at 4/6 ResNet points, BERT never ran)
#   tune-grid-resnet50, tune-search-resnet50, tune-grid-bert, tune-search-bert  issue 30 on a larger space:
#             sync, pipelined, decoupled x 1, 2, 4 contexts x queue delays 0, 100, 500, 2000 us for ResNet-50
#             (36 points), 100, 500, 2000 for BERT-base (27: at 11:46 UTC 2026-12-04 a decoupled point at 0 us
#             did not load, fixed after), two calls a case on one warm machine: the exhaustive grid, its
#             points loaded 12 (ResNet) or 14 (BERT) to a server (trtpool-tune --grid --grid-together: 3 or
#             2 server starts instead of 36 or 27; the 6-point runs above spent about 11 s of each 16-24 s
#             point starting its server), kept in
#             /tmp/grid_<case>.json and $OUT; then trtpool-tune's search as a user runs it (a server a
#             point), the ABBA re-measure of its choice against the grid's best, no p99 run. Windows of
#             2,000 ms at 80% from the start (the 6-point ResNet run settled only so).
#             -> grid_resnet50.json, tune_resnet50_large.json, ...; /tmp/tune_h200_large.json -> $OUT/tune.json
#   pipeline-null  issue 28's ceiling: the null JPEG model with 1 and with 6 instances (6 stubs, as
#             (a)'s best) beside (a) with 6 instances, 64 and 256 clients -> pipeline_null.json
#   torch-layout  bench/torch_layout.py (issue 28's GPU floor): the torch runtime's ResNet-50 fp16 batch 32
#             as served (NCHW) against channels_last, with and without cuDNN's autotuner, the image's
#             python3 with three of the carried wheels (onnx2torch, tritonclient, python-rapidjson; no
#             setup needed): carry .whl, or a folder .whl_probe of those three (2 MB) -> torch_layout.json
#   pipeline-kernel  issue 28 after the crop kernel took over the GPU path's resize and the torch runtime's
#             fp16 convolutions went channels_last (2026-12-04, fourth session): (a) sync with 6 and 8
#             instances and with 6 instances batching up to 64 files, (b)-(d), (e) with 1 and 6 instances,
#             perf_analyzer at 256, 64, 16, 1 clients (the large first: SIGINT at 450 s keeps what was
#             measured, so setup and gpu-pipeline-tests fit the same call) -> pipeline.json
#   decode-kernel  bench/gpu_decode.py after the crop kernel: torchvision, the former torch resize as the
#             baseline, nvImageCodec (all back-ends, hardware alone) -> gpu_decode.json
#   pipeline-wide  after pipeline-kernel (14:12 UTC): (a) batching up to 64 files with 8 and 10 sync instances and
#             3 pipelined instances of 2 contexts (one stub's decode and engine overlap on the GPU), beside
#             (c), (d) and (e) with 6 instances, 256 and 64 clients -> pipeline_wide.json
#   crop-timing  bench/crop_timing.py: per image, the decode's GPU and host time, the table's host time, the crop
#             kernel's GPU time beside the previous kernel's (.probe/crop_kernel_previous.py, carried: before the
#             call, here, git show REV:backend_src/trtpool/vision/crop_kernel.py > .probe/crop_kernel_previous.py) and the
#             torch resize's, batches of 32 and 64 -> crop_timing.json
#   lean-runtime  bench/lean_runtime.py (issue 37, item 14(a)): trtpool's TensorRT load path against TensorRT's
#             real lean runtime 11.4, not the double, with the image's python3 (no setup, no other wheels): the
#             cp312 lean wheels of .whl/lean (bench/gpu/fetch_wheels.sh; carry .whl/lean alone, 47 MB) installed
#             with pip install --target; runtime creation, the logger capture, engine_host_code_allowed, and a
#             corrupt, an empty and a truncated engine file and a TensorRT-RTX engine (.whl/lean/tiny_rtx.plan,
#             built by fetch_wheels.sh without a GPU), each to be refused with TensorRT's own words inside
#             trtpool's message -> lean_runtime.json
#   host-gpu-tests  issue 36: the GPU tests of the engine host (tests/gpu -k host: the JPEG example decoding
#             in the host, ResNet-50 over HTTP, gRPC and CUDA shm, thin instances holding no GPU memory)
#             -> host_gpu_tests.log
#   engine-host-jpeg  bench/engine_host.py (issue 36): resnet50_jpeg 224 fp16, the engine host with 2 and 6
#             instances against today's 6 sync instances (batches up to 64) and the null JPEG model with 6,
#             perf_analyzer at 64, 256, 512 clients; then (f), the in-process ceiling with 1, 2, 4 threads
#             -> engine_host.json (kept in /tmp/engine_host.json on the machine across calls)
#   engine-host-tensor  the same record's tensor cases: ResNet-50 224 and BERT-base 128 fp16, batch-1 clients at
#             64 over plain gRPC and CUDA shm, the host with 6 instances against 1 and 2 sync instances and the
#             null Python-backend model with 6 (Triton's own ceiling for those inputs)
#   engine-host-ipc  ResNet-50 224 fp16 with host_ipc_x6 beside the tensor case's variants: 6 thin instances whose
#             CUDA-shm inputs reach the host through CUDA IPC (FORCE_CPU_ONLY_INPUT_TENSORS no), against host_x6
#             (Triton copies the inputs to host memory), 1 and 2 sync instances and the null model with 6, 64 clients
#             (plain gRPC too, where host_ipc_x6 is host_x6) -> engine_host_ipc.json
#   engine-host-sweep  issue 36 after the seventh session (the host's GPU was 55-58% busy, its GIL held 36%: it waits
#             for the instances, and serves each instance's batch of ~6 at once): ResNet-50 224 fp16 over plain gRPC,
#             the host with 6 and 12 instances x 1, 2 and 4 contexts beside 1 and 2 sync instances and the null model
#             with 12, 64 and 128 clients (SWEEP_S: its time limit, 450 s) -> engine_host_sweep_resnet50.json
#   engine-host-contexts  the sweep's question in one short call: ResNet-50 over plain gRPC, 64 clients, the host
#             with 6 instances and 1 or 4 contexts (1: two batches at once, so the instances' batches merge)
#             beside 1 and 2 sync instances and the null model, each point with trtpool's breakdown
#             (SWEEP_S: its time limit, 200 s) -> engine_host_contexts.json
#   engine-host-jpeg-sweep  the instances and contexts for JPEG: 6 and 12 instances x 2 and 4 contexts beside 6 sync
#             instances and the null JPEG model, 512 clients -> engine_host_sweep_jpeg.json
#   engine-host-best  (after engine-host-sweep, on the same warm machine: it reads the sweep's /tmp copy) the
#             record's other tensor cases with the sweep's best host shape, 64 and 128 clients: ResNet-50 over CUDA shm
#             (host_ipc too), BERT-base over plain gRPC and CUDA shm, beside 1 and 2 sync instances and the null model
#             -> engine_host_best.json
#   engine-host-high  (the ninth session's runs after engine-host-best, as they were typed by hand) the host with 2
#             contexts at more clients: ResNet-50 over plain gRPC at 128 and 256 (6 and 12 instances) and at 512 (6),
#             over CUDA shm at 256 (host_ipc too), BERT-base over plain gRPC at 256, each beside 1 and 2 sync
#             instances and the null model -> engine_host_c256_resnet50.json, engine_host_c512_resnet50.json,
#             engine_host_c256_cudashm.json, engine_host_c256_bert.json (about 400 s on the H200, 2026-12-06)
#   engine-host-profile-resnet50  the host (6 instances) under ResNet-50 gRPC load, 64 clients: py-spy's GIL holder,
#             then every thread of the host and of one front stub, waits included -> host_gil_resnet50.txt,
#             waits_resnet50_{host,stub}.txt
#   engine-host-profile  issue 36's next step: py-spy's samples of the JPEG model's engine host (6 instances),
#             the thread holding the GIL only, under 256 clients -> host_profile.txt, engine_host_profile.json
#   ceiling-profile  issue 36: (f), the in-process ceiling (2 and 4 threads at Python switch intervals of 5, 1 and
#             0.2 ms, 8 s each), with each batch face's time per image and py-spy's samples of the GIL holder in
#             the first run (2 threads, 5 ms)
#             -> engine_host_ceiling.json, ceiling_profile.txt (bench/profile_summary.py prints its tables)
#   decoder-ab  issue 36: (f) with torchvision's decoder (one per process, behind its lock) against nvImageCodec's
#             (one per thread), 2 and 4 threads; needs stash-gpu before setup -> engine_host_ceiling_<decoder>.json
#   jpeg-probe  issue 36 (after setup): bench/jpeg_probe.py, the issue's stand-alone JPEG probe in the repo (nvJPEG
#             decode of 64 files, resize, normalize, ResNet-50 fp16 channels_last as a CUDA graph, top-5 to the host)
#             in one process of 1, 2, 4 threads, in 2, 4, 6 processes, and split: 4 and 6 decoder processes filling
#             batch slots that one engine process of 2 threads (the model once) shares with them by CUDA IPC; each
#             on the probe's 500x375 files and on the bench's mixed ones; then (f) at 2 and 4 threads on the
#             500x375 files
#             -> jpeg_probe.json, engine_host_ceiling_small.json
#   engine-host-jpeg-nvimgcodec  the JPEG case with the host decoding by nvImageCodec, 6 instances, beside today's
#             6 sync instances (torchvision) and the null model, 256 and 512 clients -> engine_host_nvimgcodec.json
#   host-roundtrip  bench/host_roundtrip.py (issue 36): the engine host's transport on this machine, 1 and
#             64 requests a run, in the image's Python (no setup); carry .whl/roundtrip, which
#             `bench/host_roundtrip.py --prepare .whl/roundtrip` writes here -> host_roundtrip.json
# Results go to $OUT (the device tool brings them back).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONUNBUFFERED=1
SERVE_VENV=/tmp/serve-venv  # made by `setup`; every later stage runs its python3
IMAGE_PYTHON=$(command -v python3)  # the image's environment: torch, onnx, numpy 2
export PATH=$SERVE_VENV/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TUNE_SPACE="--modes sync,pipelined,decoupled --contexts 1,2,4 --preferred keep --interval-ms 2000 --max-trials 3 \
--stability 80"

# tune_case grid|search CASE SHORT QUEUE_DELAYS TOGETHER GRID_MIN SEARCH_MIN [bench/tune.py flags]: a stage of the
# large-space runs (the grid's points TOGETHER to a server; each part's trtpool-tune --budget in minutes)
tune_case() {
  local part=$1 case=$2 short=$3 delays=$4 together=$5 grid_min=$6 search_min=$7; shift 7
  local grid=(--grid-record "/tmp/grid_$short.json") budget=$search_min
  if [ "$part" = grid ]; then
    grid+=(--grid-only --grid-flags "--grid-together $together")
    budget=$grid_min
  fi
  timeout -s INT 560 python3 bench/tune.py --runtime torch --precision fp16 --cases "$case" --p99-cases "" \
    --rounds 2 --tune-flags "$TUNE_SPACE --queue-delays $delays --budget $budget" "${grid[@]}" "$@" \
    --out "$OUT/tune_${short}_large.json" --merge-into /tmp/tune_h200_large.json 2>&1 \
    | grep -v '^[IWE]12' | grep -v '^\[tune\] point' | tail -n 60
  cp "/tmp/grid_$short.json" "$OUT/" 2>/dev/null
  cp /tmp/tune_h200_large.json "$OUT/tune.json" 2>/dev/null
}

for stage in "$@"; do
  echo "=== $stage $(date -u +%H:%M:%S)"
  case $stage in
    stash)
      mkdir -p "$HOME/wh" && cp .whl_big/*.whl "$HOME/wh/"
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
      python3 -c 'import sys, torch, numpy, onnx, onnxruntime; print(sys.version, torch.__version__, numpy.__version__, onnx.__version__, onnxruntime.__version__)'
      ;;
    host-gpu-tests)
      python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/gpu -k "host" 2>&1 | tee "$OUT/host_gpu_tests.log" | tail -n 12
      ;;
    engine-host-jpeg)
      timeout -s INT 330 python3 bench/engine_host.py --runtime torch --case jpeg --concurrency 64,256,512 \
        --host-instances 2,6 --out /tmp/engine_host.json 2>&1 | grep -v '^[IWE]12' | tail -n 30
      timeout -s INT 100 python3 bench/engine_host.py --runtime torch --case ceiling --seconds 5 \
        --out /tmp/engine_host.json 2>&1 | grep -v '^[IWE]12' | tail -n 8
      cp /tmp/engine_host.json "$OUT/engine_host.json"
      ;;
    engine-host-tensor)
      for case in resnet50 bert_base; do
        timeout -s INT 240 python3 bench/engine_host.py --runtime torch --case $case --concurrency 64 \
          --host-instances 6 --stability 50 --out /tmp/engine_host.json 2>&1 | grep -v '^[IWE]12' | tail -n 16
      done
      cp /tmp/engine_host.json "$OUT/engine_host.json"
      ;;
    engine-host-ipc)
      timeout -s INT 330 python3 bench/engine_host.py --runtime torch --case resnet50 --concurrency 64 \
        --host-instances 6 --host-gpu-inputs --stability 50 --out "$OUT/engine_host_ipc.json" 2>&1 \
        | grep -v '^[IWE]12' | tail -n 18
      ;;
    engine-host-sweep)
      timeout -s INT "${SWEEP_S:-450}" python3 bench/engine_host.py --runtime torch --case resnet50 --concurrency 64,128 --transports none \
        --host-instances 6,12 --host-contexts 1,2,4 --stability 50 \
        --out /tmp/engine_host_sweep_resnet50.json 2>&1 | grep -v '^[IWE]12' | tail -n 24
      cp /tmp/engine_host_sweep_resnet50.json "$OUT/"
      ;;
    engine-host-contexts)
      timeout -s INT "${SWEEP_S:-200}" python3 bench/engine_host.py --runtime torch --case resnet50 --concurrency 64 \
        --transports none --host-instances 6 --host-contexts 1,4 --stability 50 \
        --out "$OUT/engine_host_contexts.json" 2>&1 | grep -v '^[IWE]12' | tail -n 12
      ;;
    engine-host-jpeg-sweep)
      timeout -s INT 300 python3 bench/engine_host.py --runtime torch --case jpeg --concurrency 512 \
        --host-instances 6,12 --host-contexts 2,4 --out "$OUT/engine_host_sweep_jpeg.json" 2>&1 \
        | grep -v '^[IWE]12' | tail -n 16
      ;;
    engine-host-best)
      shape=$(python3 - /tmp/engine_host_sweep_resnet50.json <<'PY'
import json, re, sys
name = json.load(open(sys.argv[1]))["resnet50_b1_grpc_host_best"]
count, contexts, wait = re.fullmatch(r"host_x(\d+)(?:_c(\d+))?(?:_w(\d+))?", name).groups()
print(f"--host-instances {count} --host-contexts {contexts or 4} --host-batch-waits {wait or 0}")
PY
      ) || exit 7
      echo "the sweep's best host shape: $shape"
      timeout -s INT 230 python3 bench/engine_host.py --runtime torch --case resnet50 --concurrency 64,128 $shape \
        --transports cuda --host-gpu-inputs --stability 50 --out "$OUT/engine_host_best.json" 2>&1 \
        | grep -v '^[IWE]12' | tail -n 16
      timeout -s INT 300 python3 bench/engine_host.py --runtime torch --case bert_base --concurrency 64,128 $shape \
        --stability 50 --out "$OUT/engine_host_best.json" 2>&1 | grep -v '^[IWE]12' | tail -n 20
      ;;
    engine-host-high)
      high() {  # NAME SECONDS ARGS...: one run of bench/engine_host.py, the host with 2 contexts
        local name=$1 seconds=$2; shift 2
        timeout -s INT "$seconds" python3 bench/engine_host.py --runtime torch --host-contexts 2 --stability 50 "$@" \
          --out "$OUT/engine_host_$name.json" 2>&1 | grep -v '^[IWE]12' | tail -n 12
      }
      high c256_resnet50 330 --case resnet50 --concurrency 128,256 --transports none --host-instances 6,12
      high c512_resnet50 250 --case resnet50 --concurrency 512 --transports none --host-instances 6
      high c256_cudashm 165 --case resnet50 --concurrency 256 --transports cuda --host-gpu-inputs --host-instances 6
      high c256_bert 165 --case bert_base --concurrency 256 --transports none --host-instances 6
      ;;
    engine-host-profile-resnet50)
      timeout -s INT 200 python3 bench/engine_host.py --runtime torch --case resnet50 --concurrency 64 \
        --host-instances 6 --profile-host "$OUT/host_gil_resnet50.txt" --profile-waits "$OUT/waits_resnet50.txt" \
        --out "$OUT/engine_host_profile_resnet50.json" 2>&1 | grep -v '^[IWE]12' | tail -n 4
      python3 bench/profile_summary.py "$OUT/host_gil_resnet50.txt" --rate 200 --seconds 12 --top 16
      for side in host stub; do python3 bench/profile_summary.py "$OUT/waits_resnet50_$side.txt" --by-thread --top 10; done
      ;;
    engine-host-profile)
      timeout -s INT 240 python3 bench/engine_host.py --runtime torch --case jpeg --concurrency 256 \
        --host-instances 6 --profile-host "$OUT/host_profile.txt" --out "$OUT/engine_host_profile.json" 2>&1 \
        | grep -v '^[IWE]12' | tail -n 6
      python3 bench/profile_summary.py "$OUT/host_profile.txt"
      ;;
    profile-waits)
      timeout -s INT 150 python3 bench/engine_host.py --runtime torch --case ceiling --ceiling-threads 4,8 --seconds 8 \
        --profile-waits "$OUT/ceiling_waits.txt" --out "$OUT/engine_host_ceiling_threads.json" 2>&1 \
        | grep -v '^[IWE]12' | tail -n 3
      python3 bench/profile_summary.py "$OUT/ceiling_waits.txt" --by-thread --top 12
      for case in resnet50 jpeg; do
        timeout -s INT 200 python3 bench/engine_host.py --runtime torch --case $case --concurrency $([ $case = jpeg ] && echo 256 || echo 64) \
          --host-instances 6 --profile-host "$OUT/host_gil_$case.txt" --profile-waits "$OUT/waits_$case.txt" \
          --out "$OUT/engine_host_profile_$case.json" 2>&1 | grep -v '^[IWE]12' | tail -n 4
        python3 bench/profile_summary.py "$OUT/host_gil_$case.txt" --rate 200 --seconds 12 --top 12
        for side in host stub; do python3 bench/profile_summary.py "$OUT/waits_${case}_$side.txt" --by-thread --top 8; done
      done
      ;;
    decoder-hw)
      timeout -s INT 150 python3 bench/gpu_decode.py --seconds 1 --batches 32 64 --ways torchvision nvimgcodec nvimgcodec_hw \
        --out "$OUT/gpu_decode.json" 2>&1 | grep -v '^[IWE]12' | tail -n 12
      for way in torchvision nvimgcodec:HW_GPU_ONLY nvimgcodec:GPU_ONLY; do
        decoder=${way%%:*}; backends=$([ "$way" != "$decoder" ] && echo "--host-decoder-backends ${way#*:}")
        timeout -s INT 120 python3 bench/engine_host.py --runtime torch --case ceiling --ceiling-threads 2,4 --seconds 5 \
          --host-decoder $decoder $backends --out "$OUT/engine_host_ceiling_${way/:/_}.json" 2>&1 | grep -v '^[IWE]12' | tail -n 3
      done
      ;;
    ceiling-profile)
      timeout -s INT 200 python3 bench/engine_host.py --runtime torch --case ceiling --ceiling-threads 2,4 \
        --switch-intervals 0.005,0.001,0.0002 --seconds 8 --profile "$OUT/ceiling_profile.txt" \
        --out "$OUT/engine_host_ceiling.json" 2>&1 \
        | grep -v '^[IWE]12' | tail -n 8
      python3 bench/profile_summary.py "$OUT/ceiling_profile.txt" --rate 100 --seconds 7
      ;;
    decoder-ab)
      for decoder in torchvision nvimgcodec; do
        timeout -s INT 150 python3 bench/engine_host.py --runtime torch --case ceiling --ceiling-threads 2,4 --seconds 8 \
          --host-decoder $decoder --out "$OUT/engine_host_ceiling_$decoder.json" 2>&1 | grep -v '^[IWE]12' | tail -n 3
      done
      ;;
    jpeg-probe)
      timeout -s INT 330 python3 bench/jpeg_probe.py --out "$OUT/jpeg_probe.json" 2>&1 | tail -n 40
      timeout -s INT 100 python3 bench/engine_host.py --runtime torch --case ceiling --ceiling-threads 2,4 --seconds 5 \
        --file-set small --out "$OUT/engine_host_ceiling_small.json" 2>&1 | grep -v '^[IWE]12' | tail -n 6
      ;;
    engine-host-jpeg-nvimgcodec)
      timeout -s INT 330 python3 bench/engine_host.py --runtime torch --case jpeg --concurrency 256,512 \
        --host-instances 6 --host-decoder nvimgcodec --out "$OUT/engine_host_nvimgcodec.json" 2>&1 \
        | grep -v '^[IWE]12' | tail -n 24
      ;;
    host-roundtrip)
      "$IMAGE_PYTHON" bench/host_roundtrip.py --from .whl/roundtrip --out "$OUT/host_roundtrip.json" 2>&1 | tail -n 4
      ;;
    lean-runtime)
      rm -rf /tmp/trt-lean
      "$IMAGE_PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/trt-lean \
        .whl/lean/tensorrt_lean_cu12_*.whl || exit 4
      PYTHONPATH="/tmp/trt-lean:$PWD/backend_src:$PWD/builder:$PWD" "$IMAGE_PYTHON" bench/lean_runtime.py \
        --rtx-engine .whl/lean/tiny_rtx.plan --out "$OUT/lean_runtime.json" 2>&1 | tail -n 40
      ;;
    stash-gpu)
      mkdir -p "$HOME/wh-gpu" && cp .whl_gpu/*.whl "$HOME/wh-gpu/"
      ;;
    setup)
      ls "$HOME"/wh/nvidia_pytriton-*.whl >/dev/null || { echo "NO PYTRITON WHEEL: run stash first"; exit 3; }
      # The stub's Python is the python3 first on PATH, with that environment's
      # sys.path (it ignores PYTHONPATH). The image's environment has numpy 2,
      # which tritonserver 2.51's stub mishandles, so serve from a venv of our own:
      # the carried wheels (numpy 1.26.4, ml_dtypes 0.5.4 for the image's onnx,
      # tritonclient ...) first, then the image's packages (torch, onnx), then trtpool.
      image_site=$("$IMAGE_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      "$IMAGE_PYTHON" -m venv --without-pip "$SERVE_VENV" || exit 4
      site=$("$SERVE_VENV/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      "$IMAGE_PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/pip/*.whl \
        $(ls "$HOME"/wh-gpu/*.whl 2>/dev/null) || exit 4
      ln -sf "$site/bin/py-spy" "$SERVE_VENV/bin/py-spy"
      printf '%s\n' "$PWD/backend_src" "$PWD/builder" "$PWD/ops" "$PWD" "import site; site.addsitedir('$image_site')" \
        > "$site/zz-trtpool-h200.pth"
      # trtpool's console scripts, as an install makes them (pip cannot build the project offline here).
      "$SERVE_VENV/bin/python3" - "$SERVE_VENV/bin" <<'PY' || exit 4
import sys, tomllib
from pathlib import Path
bin_dir = Path(sys.argv[1])
for name, target in tomllib.loads(Path("pyproject.toml").read_text())["project"]["scripts"].items():
    module, function = target.split(":")
    script = bin_dir / name
    script.write_text(f"#!{bin_dir / 'python3'}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n")
    script.chmod(0o755)
PY
      cp .whl/house/* "$HOME/wh/"
      TRTPOOL_WHEELHOUSE=$HOME/wh TRTPOOL_SYSTEM_PYTHON=1 bash scripts/setup.sh || exit 5
      python3 -c 'import numpy, torch, onnx, onnx2torch, trtpool, tritonclient.grpc, pytest
print("serving python", __import__("sys").executable, "numpy", numpy.__version__, "torch", torch.__version__, "onnx", onnx.__version__)' || exit 6
      ;;
    served-tests)
      python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/gpu 2>&1 | tee "$OUT/gpu_served_tests.log" | tail -n 5
      ;;
    tests)
      python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/unit/trtpool/runtimes/torch/test_runtime.py tests/unit/trtpool/gpu/test_cuda.py tests/unit/trtpool/gpu/test_cuda_graphs.py \
        tests/unit/trtpool/triton/test_requests.py tests/gpu 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 25
      ;;
    inprocess)
      python3 bench/inprocess.py --runtime torch --model resnet50 --onnx /tmp/resnet50.onnx --precision fp16 \
        --contexts 1,2,4,8 --batches 1,8,32 --seconds 1.5 --output "$OUT/inprocess_resnet50_fp16.json" 2>&1 | tail -n 5
      python3 bench/inprocess.py --runtime torch --model bert_base --onnx /tmp/bert_base.onnx --precision fp16 \
        --seq-len 128 --contexts 1,2,4,8 --batches 1,8,32 --seconds 1.5 --output "$OUT/inprocess_bert_base_fp16.json" 2>&1 | tail -n 5
      ;;
    serving)
      python3 bench/gpu_serving.py --runtime torch --precision fp16 --sections throughput,latency \
        --out "$OUT/gpu_serving.json" 2>&1 \
        | tee "$OUT/gpu_serving.log" | grep -v '^W' | tail -n 60
      ;;
    pool)
      # Saturation points of one sync and one decoupled model, with Triton's default
      # 64 MiB CUDA memory pool (parent <-> stub GPU tensors) and with 2 GiB.
      for pool in 64m 2g; do
        extra=(); [ $pool = 2g ] && extra=(--server-arg=--cuda-memory-pool-byte-size=0:2147483648)
        python3 bench/gpu_serving.py --runtime torch --precision fp16 --sections throughput --levels 32 \
          --models c1,c4_dec "${extra[@]}" --out "$OUT/gpu_serving_pool_$pool.json" 2>&1 \
          | grep -v '^[IWE]1202' | tail -n 12
      done
      ;;
    saturation)
      # More clients in flight than the standard run's 8: is concurrency 8 saturation?
      python3 bench/gpu_serving.py --runtime torch --precision fp16 --sections throughput --levels 64 \
        --batch-levels 16,32 --transports cuda --models c1,c1_inline,c4_dec \
        --out "$OUT/gpu_serving_saturation.json" 2>&1 \
        | grep -v '^[IWE]1202' | tail -n 20
      ;;
    decoupled-recheck)
      python3 bench/gpu_serving.py --runtime torch --precision fp16 --sections throughput --levels 64 \
        --batch-levels 16 --transports cuda --models c4_dec \
        --out "$OUT/gpu_serving_decoupled_recheck.json" 2>&1 \
        | grep -v '^[IWE]1202' | tail -n 8
      ;;
    contexts)
      for example in resnet50 bert_base; do
        python3 bench/gpu_serving.py --runtime torch --precision fp16 --example $example --sections throughput \
          --levels 16,64 --batch-levels "" --models c1,c4,c1_dec,c4_dec \
          --out "$OUT/gpu_serving_contexts_$example.json" 2>&1 | grep -v '^[IWE]1202' | tail -n 14
      done
      ;;
    breakdown)
      for example in resnet50 bert_base; do
        seq=(); [ $example = bert_base ] && seq=(--seq-len 128)
        python3 bench/inprocess.py --runtime torch --model $example --onnx /tmp/$example.onnx --precision fp16 \
          "${seq[@]}" --contexts 1,4 --batches 1,8,32 --seconds 1.5 \
          --output "$OUT/breakdown_inprocess_$example.json" 2>&1 | tail -n 3
        python3 bench/gpu_serving.py --runtime torch --precision fp16 --example $example --sections throughput \
          --levels 64 --batch-levels 16 --transports cuda --models c1,c1_dec,c4_dec \
          --out "$OUT/breakdown_serving_$example.json" 2>&1 | grep -v '^[IWE]1202' | tail -n 14
      done
      ;;
    memory)
      for example in resnet50 bert_base; do
        python3 bench/gpu_serving.py --runtime torch --precision fp16 --example $example --sections memory \
          --out "$OUT/gpu_memory_$example.json" 2>&1 | grep -v '^[IWE]1202' | tail -n 4
      done
      ;;
    memory-breakdown)
      python3 bench/memory_breakdown.py --model bert_base --onnx /tmp/bert_base.onnx --precision fp16 \
        --contexts 4 --seq-len 128 --output "$OUT/memory_breakdown_bert_base.json" 2>&1 | tail -n 9
      python3 bench/memory_breakdown.py --model resnet50 --onnx /tmp/resnet50.onnx --precision fp16 \
        --contexts 4 --output "$OUT/memory_breakdown_resnet50.json" 2>&1 | tail -n 9
      ;;
    bert-grpc)
      python3 bench/gpu_serving.py --runtime torch --precision fp16 --example bert_base --sections throughput \
        --levels 8 --batch-levels 8 --transports cuda,none --models c1,c4_dec \
        --out "$OUT/gpu_serving_bert_grpc.json" 2>&1 | grep -v '^[IWE]1202' | tail -n 14
      ;;
    tail)
      python3 bench/gpu_serving.py --runtime torch --precision fp16 --example bert_base --sections latency \
        --peak 2289 --models c1,c1_inline --out "$OUT/gpu_latency_bert_flush.json" 2>&1 \
        | grep -v '^[IWE]1202' | tail -n 6
      ;;
    sync-plain)
      python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/gpu 2>&1 | tee "$OUT/gpu_served_tests.log" | tail -n 2
      python3 bench/gpu_serving.py --runtime torch --precision fp16 --sections throughput --levels 64 \
        --batch-levels 16 --transports cuda --models c1 --out "$OUT/gpu_serving_sync_plain.json" 2>&1 \
        | grep -v '^[IWE]1202' | tail -n 6
      ;;
    memory-small)
      # The memory comparison with small activations: BERT capped at 8 x 128 tokens.
      shapes=1x1:8x128:8x128
      python3 bench/gpu_serving.py --runtime torch --precision fp16 --example bert_base --sections memory \
        --memory-profile "input_ids=$shapes,attention_mask=$shapes" --out "$OUT/gpu_memory_8x128.json" 2>&1 \
        | grep -v '^[IWE]1202' | tail -n 4
      ;;
    bert)
      # BERT-base served (sequence 128): batch-1 clients at 32, batch-8/32 clients at 8 (CUDA shm),
      # then p50/p99 at 50% and 90% of the best batch-1 CUDA-shm rate.
      python3 bench/gpu_serving.py --runtime torch --precision fp16 --example bert_base --sections throughput,latency \
        --levels 32 --transports cuda --models c1,c4_dec --out "$OUT/gpu_serving_bert.json" 2>&1 \
        | grep -v '^[IWE]1202' | tail -n 12
      ;;
    ceiling)
      python3 bench/ceiling.py --runtime torch --precision fp16 --profile "$OUT/ceiling_profile.txt" \
        --out "$OUT/ceiling.json" 2>&1 | grep -v '^[IWE]12' | tail -n 30
      ;;
    ceiling-final)
      # The record: the variants the first two runs kept apart, with the final code.
      python3 bench/ceiling.py --runtime torch --precision fp16 --variants sync_c1,pipe_c1,pipe_c2,pipe_c4 \
        --out "$OUT/ceiling.json" 2>&1 | grep -v '^[IWE]12' | tail -n 24
      ;;
    cuda-shm-ab)
      base=$(ls -d .whl/base-* 2>/dev/null | head -n 1)
      [ -n "$base" ] || { echo "NO EARLIER CODE: make .whl/base-REV first (see the header)"; exit 7; }
      python3 bench/code_ab.py --base-dir "$base" --runtime torch --precision fp16 --example resnet50 \
        --shm cuda --batch 32 --concurrency 8 --mode pipelined --contexts 2 --rounds 2 --interval-ms 1500 \
        --out "$OUT/cuda_shm_ab.json" 2>&1 | grep -v '^[IWE]12' | tail -n 8
      ;;
    host-copies)
      python3 bench/host_copies.py --model resnet50 --onnx /tmp/resnet50.onnx --precision fp16 \
        --output "$OUT/host_copies.json" 2>&1 | tail -n 6
      ;;
    host-path-inprocess)
      # host-path's in-process section alone (it ran past 90 s in the 2026-12-03 loan): kept in /tmp
      # for host-path-served on the same warm machine, and returned in $OUT
      python3 bench/host_path.py --runtime torch --precision fp16 --variants sync_c1,pipe_c2,pipe_c4 \
        --inprocess-only --out /tmp/host_path_inprocess.json 2>&1 | grep -v '^[IWE]12' | tail -n 20
      cp /tmp/host_path_inprocess.json "$OUT/"
      ;;
    host-path-served)
      python3 bench/host_path.py --runtime torch --precision fp16 --variants sync_c1,pipe_c2,pipe_c4 \
        --inprocess-from /tmp/host_path_inprocess.json --profile "$OUT/host_path_profile.txt" --native \
        --out "$OUT/host_path.json" 2>&1 \
        | grep -v '^[IWE]12' | tail -n 40
      ;;
    host-path)
      python3 bench/host_path.py --runtime torch --precision fp16 --profile "$OUT/host_path_profile.txt" --native \
        --out "$OUT/host_path.json" 2>&1 | grep -v '^[IWE]12' | tail -n 40
      ;;
    latency)
      python3 bench/gpu_serving.py --runtime torch --precision fp16 --sections latency --peak 2461 \
        --out "$OUT/gpu_latency.json" 2>&1 | grep -v '^[IW]1202' | tail -n 8
      ;;
    elastic)
      python3 bench/elastic.py --runtime torch --precision fp16 --example bert_base --seq-len 128 \
        --low 1 --peak 16 --max-contexts 4 --phases 20,30,45 --idle 20 --rounds 4 \
        --out "$OUT/elastic.json" 2>&1 | grep -v '^[IWE]12' | tail -n 40
      ;;
    pipeline)
      python3 -c 'import PIL' || exit 6
      python3 bench/pipeline.py --runtime torch --precision fp16 --image-size 224 --contexts 2 \
        --concurrency 1 16 64 --rounds 2 --seconds 6 --pre-instances 4 8 --pre-processes 8 --client-processes 4 \
        --out "$OUT/pipeline.json" 2>&1 | grep -v '^[IWE]12' | tail -n 30
      ;;
    decode)
      python3 bench/gpu_decode.py --seconds 1 --out "$OUT/gpu_decode.json" 2>&1 | tail -n 16
      ;;
    gpu-pipeline-tests)
      python3 -m pytest -p no:cacheprovider -q -rs -s -m gpu tests/gpu/test_gpu_pipeline.py tests/unit/trtpool/runtimes/torch/test_runtime.py 2>&1 \
        | tee "$OUT/gpu_pipeline_tests.log" | grep -v '^[IWE]12' | tail -n 30
      ;;
    pipeline-gpu)
      python3 bench/pipeline.py --runtime torch --precision fp16 --image-size 224 --contexts 2 --gpu-variants \
        --concurrency 1 16 64 256 --pre-instances 8 --pre-processes 8 --gpu-pre-instances 2 --interval-ms 2500 \
        --out "$OUT/pipeline.json" 2>&1 | grep -v '^[IWE]12' | tail -n 30
      ;;
    pipeline-gpu-rerun)
      # The 03:19 UTC run's copies (sync, Pillow in processes) had the tests' 20 ms queue delay; again
      # with 100 us beside the ensembles and the null model, 64 and 256 clients (what device time allowed)
      python3 bench/pipeline.py --runtime torch --precision fp16 --image-size 224 --contexts 2 --gpu-variants \
        --concurrency 64 256 --pre-instances 8 --pre-processes 8 --gpu-pre-instances 2 --interval-ms 2000 \
        --variants gpu_inprocess_sync gpu_inprocess_sync_x2 cpu_inprocess cpu_ensemble gpu_ensemble null_jpeg \
        --out "$OUT/pipeline_rerun.json" 2>&1 | grep -v '^[IWE]12' | tail -n 16
      ;;
    pipeline-probe)
      python3 bench/pipeline.py --runtime torch --precision fp16 --image-size 224 --gpu-variants \
        --concurrency 64 256 --interval-ms 2000 \
        --variants gpu_inprocess_sync gpu_inprocess_sync_x2 gpu_inprocess_sync_x3 gpu_inprocess_sync_x4 null_jpeg \
        --profile gpu_inprocess_sync --gil --profile-concurrency 64 --profile-out "$OUT/pipeline_probe_profile.txt" \
        --out "$OUT/pipeline_probe.json" 2>&1 | grep -v '^[IWE]12' | tail -n 16
      ;;
    pipeline-final)
      python3 bench/pipeline.py --runtime torch --precision fp16 --image-size 224 --gpu-variants \
        --concurrency 1 16 64 256 --pre-instances 8 --pre-processes 8 --gpu-pre-instances 2 --interval-ms 1500 \
        --variants gpu_inprocess_sync_x4 gpu_inprocess_sync_x6 cpu_inprocess cpu_ensemble gpu_ensemble null_jpeg \
        --out "$OUT/pipeline.json" 2>&1 | grep -v '^[IWE]12' | tail -n 30
      ;;
    pipeline-one-client)
      python3 bench/pipeline.py --runtime torch --precision fp16 --image-size 224 --gpu-variants \
        --concurrency 1 --gpu-pre-instances 2 --interval-ms 4000 \
        --variants gpu_inprocess_sync_x4 gpu_ensemble null_jpeg \
        --out "$OUT/pipeline_one_client.json" 2>&1 | grep -v '^[IWE]12' | tail -n 8
      ;;
    device-tests)
      python3 -m pytest -p no:cacheprovider -q -rs -s -m gpu tests/gpu/test_gpu_pipeline.py \
        tests/unit/trtpool/runtimes/torch/test_runtime.py -k "pipeline or gpu_outputs_kept or device" 2>&1 \
        | tee "$OUT/gpu_pipeline_tests.log" | grep -v '^[IWE]12' | tail -n 12
      ;;
    tune-resnet50)
      timeout -s INT 570 python3 bench/tune.py --runtime torch --precision fp16 --image-size 224 \
        --cases resnet50-b1-grpc --p99-cases resnet50-b1-grpc --rounds 2 \
        --tune-flags "--modes sync,pipelined --contexts 1,2,4 --queue-delays 100 --preferred keep --interval-ms 1000 --max-trials 3 --stability 60 --budget 2.7" \
        --out "$OUT/tune_resnet50.json" --merge-into /tmp/tune_h200.json 2>&1 | grep -v '^[IWE]12' | tail -n 40
      cp /tmp/tune_h200.json "$OUT/tune.json"
      ;;
    tune-bert)
      timeout -s INT 570 python3 bench/tune.py --runtime torch --precision fp16 \
        --cases bert_base-b32-cudashm --p99-cases "" --rounds 2 \
        --tune-flags "--modes sync,pipelined --contexts 1,2,4 --queue-delays 100 --preferred keep --interval-ms 1000 --max-trials 3 --stability 60 --budget 3.5" \
        --out "$OUT/tune_bert.json" --merge-into /tmp/tune_h200.json 2>&1 | grep -v '^[IWE]12' | tail -n 40
      cp /tmp/tune_h200.json "$OUT/tune.json"
      ;;
    tune-grid-resnet50) tune_case grid resnet50-b1-grpc resnet50 0,100,500,2000 12 8.5 5 --image-size 224 ;;
    tune-search-resnet50) tune_case search resnet50-b1-grpc resnet50 0,100,500,2000 12 8.5 5 --image-size 224 ;;
    tune-grid-bert) tune_case grid bert_base-b32-cudashm bert 100,500,2000 14 8 4.5 ;;
    tune-search-bert) tune_case search bert_base-b32-cudashm bert 100,500,2000 14 8 4.5 ;;
    pipeline-null)
      python3 bench/pipeline.py --runtime torch --precision fp16 --image-size 224 --gpu-variants \
        --concurrency 64 256 --interval-ms 1500 --variants gpu_inprocess_sync_x6 null_jpeg null_jpeg_x6 \
        --out "$OUT/pipeline_null.json" 2>&1 | grep -v '^[IWE]12' | tail -n 12
      ;;
    pipeline-kernel)
      timeout -s INT 450 python3 bench/pipeline.py --runtime torch --precision fp16 --image-size 224 --gpu-variants \
        --concurrency 256 64 16 1 --pre-instances 8 --pre-processes 8 --gpu-pre-instances 2 --interval-ms 1500 \
        --variants gpu_inprocess_sync_x6 gpu_inprocess_sync_x8 gpu_inprocess_sync_x6_b64 cpu_inprocess cpu_ensemble \
        gpu_ensemble null_jpeg null_jpeg_x6 --out "$OUT/pipeline.json" 2>&1 | grep -v '^[IWE]12' | tail -n 40
      ;;
    pipeline-wide)
      timeout -s INT 480 python3 bench/pipeline.py --runtime torch --precision fp16 --image-size 224 --gpu-variants \
        --concurrency 256 64 --pre-instances 8 --gpu-pre-instances 2 --interval-ms 1500 \
        --variants gpu_inprocess_sync_x8_b64 gpu_inprocess_sync_x10_b64 gpu_inprocess_pipelined_x3_b64 cpu_ensemble \
        gpu_ensemble null_jpeg_x6 --out "$OUT/pipeline_wide.json" 2>&1 | grep -v '^[IWE]12' | tail -n 20
      ;;
    crop-timing)
      previous=(); [ -f .probe/crop_kernel_previous.py ] && previous=(--previous .probe/crop_kernel_previous.py)
      python3 bench/crop_timing.py "${previous[@]}" --out "$OUT/crop_timing.json" 2>&1 | tail -n 8
      ;;
    decode-kernel)
      python3 bench/gpu_decode.py --seconds 1 --ways torchvision torch_resize nvimgcodec nvimgcodec_hw \
        --out "$OUT/gpu_decode.json" 2>&1 | tail -n 16
      ;;
    torch-layout)
      wheel=$(ls .whl_probe/*.whl 2>/dev/null || ls .whl/pip/onnx2torch-*.whl .whl/pip/tritonclient-*.whl .whl/pip/python_rapidjson-*.whl)
      "$IMAGE_PYTHON" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site-probe $wheel || exit 4
      PYTHONPATH=/tmp/site-probe "$IMAGE_PYTHON" bench/torch_layout.py --out "$OUT/torch_layout.json" 2>&1 \
        | grep -v Warning | tail -n 12
      ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
