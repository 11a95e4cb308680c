#!/usr/bin/env bash
# The GPU rows: the CUDA-only tests, then the benchmarks that take a device, on one CUDA GPU.
#
#   bash benchmarks/gpu.sh [LOG_DIR]      (from the repository root; logs default to gpu-logs/)
#
# Each part has its own time limit and log, so a part that fails or hangs leaves the others'
# results. The rows it prints are the ones benchmarks/README.md lists under "GPU".
# The parts' limits add up to 570 s, so the whole script fits one 600 s command on a lent machine
# (on an H200 it took 213 s).
set -uo pipefail
log="${1:-gpu-logs}"
mkdir -p "$log"
export PYTHONUNBUFFERED=1
status=0
part() {  # part NAME SECONDS COMMAND...: run one part with a time limit, log it, remember a failure
    local name="$1" limit="$2"
    shift 2
    echo "::: $name"
    timeout "$limit" "$@" 2>&1 | tee "$log/$name.txt"
    local rc="${PIPESTATUS[0]}"
    [[ "$rc" == 0 ]] || { echo "::: $name exited $rc"; status=1; }
}
part machine 30 python3 -c "import torch, platform; print('python', platform.python_version(), '| torch', torch.__version__, '|', torch.cuda.get_device_name(), '|', torch.cuda.get_device_properties(0).total_memory // 2**30, 'GiB')"
part tests 150 python3 -m pytest -n 4 -q -p no:cacheprovider -rs -k "cuda or gpu" \
    tests/frame/algorithms/test_compiled.py tests/frame/buffers/test_buffer_d.py tests/frame/buffers/test_fast_path.py tests/parallel/test_pool.py \
    tests/parallel/test_pickle.py tests/parallel/test_assigner.py tests/frame/test_optimizers.py
part compiled 270 python3 -m benchmarks.compiled cuda
part dqn_step 60 python3 -m benchmarks.dqn_loop cuda
part sac_update 60 python3 -m benchmarks.ac_updates cuda
exit "$status"
