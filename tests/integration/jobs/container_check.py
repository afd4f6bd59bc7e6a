"""One line per task: where it runs, and in which container (singularity sets SINGULARITY_NAME to the image)."""

import json
import os
import socket

print("CKIT-RESULT " + json.dumps({
    "rank": int(os.environ.get("SLURM_PROCID", "0")), "host": socket.gethostname(),
    "container": os.environ.get("SINGULARITY_NAME", ""), "cwd": os.getcwd()}), flush=True)
