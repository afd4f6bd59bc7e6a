#!/usr/bin/env bash
# make demo: ckit's main job end to end, offline, on this machine's real components.
#   1. render every stack as a Dockerfile and a .def
#   2. build the demo stack with podman (docker API) and convert it to .sif and .sqsh, without root tools
#   3. push the image, the .sif and the .sqsh to a throwaway local registry, pull them back, verify them
#   4. launch the demo image on the local Slurm with two tasks and show their output, then its .sif on two nodes
#      under Apptainer (Debian's, as a Singularity site runs it)
#   5. write the job scripts every site would get
# Output goes to ./out (CKIT_DEMO_OUT overrides). Components are started here and stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=${CKIT_DEMO_OUT:-$root/out}
ckit=$root/.venv/bin/ckit
py=$root/.venv/bin/python
export CKIT_CACHE_DIR=${CKIT_CACHE_DIR:-$out/cache}
step() { printf '\n== %s\n' "$*"; }

rm -rf "$out/recipes" "$out/artifacts" "$out/pulled" "$out/launch" "$out/sites"
mkdir -p "$out"/{recipes,artifacts,pulled,launch,sites}

step "1. render every stack (its build context: Dockerfile, Singularity.def and the files they copy)"
for stack in $("$ckit" recipes --json | "$py" -c 'import json,sys; print(" ".join(s["name"] for s in json.load(sys.stdin)["stacks"]))'); do
  "$ckit" -q render "$stack" --format docker -o "$out/recipes/$stack/"
  "$ckit" -q render "$stack" --format singularity -o "$out/recipes/$stack/"
done

step "starting podman (docker API), a local registry, Slurm and Apptainer"
bash tests/infra/start.sh podman debian registry slurm apptainer >/dev/null
trap 'bash tests/infra/stop.sh >/dev/null 2>&1 || true' EXIT
# shellcheck disable=SC1091
source "${CKIT_RUN_DIR:-$root/.run}/env.sh"

step "2. ckit build demo --to image,sif,sqsh"
"$ckit" build demo --to image,sif,sqsh -o "$out/artifacts" --json > "$out/build.json"
image=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["tag"])' "$out/build.json")
sif=$(ls "$out"/artifacts/*.sif)
sqsh=$(ls "$out"/artifacts/*.sqsh)
"$ckit" inspect "$sif" | sed -n '1,12p'

step "3. push to a local registry, pull back, verify"
reg=127.0.0.1:5000
"$ckit" push "docker-daemon:$image" "$reg/ckit/demo:1.0"
"$ckit" push "$sif" "$reg/ckit/demo:1.0-sif" --stack demo
"$ckit" push "$sqsh" "$reg/ckit/demo:1.0-sqsh" --stack demo
"$ckit" pull "$reg/ckit/demo:1.0-sif" -o "$out/pulled"
"$ckit" pull "$reg/ckit/demo:1.0-sqsh" -o "$out/pulled"
cmp "$sif" "$out/pulled/$(basename "$sif")" && cmp "$sqsh" "$out/pulled/$(basename "$sqsh")" \
  && echo "pulled artifacts are byte-identical to the built ones"

step "4. launch the demo image on the local Slurm, two tasks"
(cd "$out/launch" && "$ckit" launch --site local --runtime podman --image "$image" --framework ddp \
  --tasks-per-node 2 --name demo --script demo.sbatch --submit --wait --json -- hello --greet from-slurm > job.json)
job_out=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["output"])' "$out/launch/job.json")
sort "$job_out"
(cd "$out/launch" && "$ckit" launch --site local --runtime apptainer --partition multi --nodes 2 --image "$sif" \
  --name demo-sif --script demo-sif.sbatch --submit --wait --json -- --greet > job-sif.json)
job_out=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["output"])' "$out/launch/job-sif.json")
sort "$job_out"

step "5. the job script each site would get"
"$ckit" launch --site twnia2 --account MST108XXX --nodes 2 --image /work/TWCC_cntr/demo.sif --framework horovod \
  --dry-run -- hello > "$out/sites/twnia2.sbatch"
"$ckit" launch --site neuron --comment pytorch --partition cas_v100_4 --nodes 2 --gpus-per-node 2 \
  --image /scratch/demo/demo.sif --framework ddp --dry-run -- hello > "$out/sites/neuron.sbatch"
"$ckit" launch --site oci --nodes 2 --image "$sqsh" --framework tf --dry-run -- hello \
  > "$out/sites/oci.sbatch"
"$ckit" launch --site tara --account proj0001 --image /tarafs/data/project/demo/demo.sif --framework ddp \
  --dry-run -- hello > "$out/sites/tara.sbatch"
"$ckit" launch --site apulis --image apulistech/horovod:0.19.2-tf2.2.0-torch1.5.0-py3.6.9-gpu --framework horovod \
  --nodes 2 --gpus-per-node 8 --dry-run -- python /examples/tensorflow2_keras_mnist.py > "$out/sites/apulis.txt"

step "what was written"
"$py" - "$out" <<'PY'
import sys
from pathlib import Path
out = Path(sys.argv[1])
rows = sorted(p for p in out.rglob("*") if p.is_file() and "cache" not in p.relative_to(out).parts)
width = max(len(str(p.relative_to(out))) for p in rows)
for p in rows:
    print(f"  {str(p.relative_to(out)):<{width}}  {p.stat().st_size:>10,} bytes")
PY
