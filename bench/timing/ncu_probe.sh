#!/usr/bin/env bash
# On a GPU host, from the kit of device_gpu_check.sh: Nsight Compute over kiln-eval-cuda on cuda_softmax,
# the first 4 kernels of every process (the candidate's and the reference's runners are forked children,
# hence --target-processes all), with the metrics a proposer would want. Writes ncu.csv and ncu.err to
# $OUT. Shows the CSV's shape (ncu's own ==PROF== lines first, a header row, a units row, numbers with
# thousands separators) and what profiling one evaluation costs.
set -u
tar xJf build-gpu/kit.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu-rt/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
w=$(mktemp -d); t=configs/tasks/cuda_softmax
for f in kernel reference; do nvcc -O3 -shared -Xcompiler -fPIC -cudart shared -arch=sm_90 -Ilibs/core/include -o $w/$f.so $t/$f.cu || exit 1; done
ncu --version | tail -1
M=gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct,launch__registers_per_thread,launch__shared_mem_per_block_static,launch__shared_mem_per_block_dynamic,launch__block_size,launch__grid_size
s=$(date +%s)
timeout 200 ncu --target-processes all --csv --page raw --launch-count 4 --metrics $M build-gpu/bin/kiln-eval-cuda --task $t --kernel $w/kernel.so --reference $w/reference.so --out $w/r.msgpack --mode warm --min-time 0.1 --max-time 0.5 > $OUT/ncu.csv 2> $OUT/ncu.err
echo "ncu exit $? in $(( $(date +%s) - s )) s"
head -c 3000 $OUT/ncu.csv; echo; tail -c 1500 $OUT/ncu.err
