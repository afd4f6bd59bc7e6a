"""A 2-rank MPI job: allreduce of rank+1 and the ranks' host names (one JSON line per rank)."""

import json
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
print("CKIT-RESULT " + json.dumps({
    "rank": comm.Get_rank(), "world": comm.Get_size(), "host": socket.gethostname(),
    "allreduce": comm.allreduce(comm.Get_rank() + 1), "hosts": sorted(comm.allgather(socket.gethostname()))}),
    flush=True)
