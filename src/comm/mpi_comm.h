// Ranks as processes under mpirun (OpenMPI; optional at build time): the
// CPU collectives over MPI, and what NCCL needs to start (its unique id
// broadcast from rank 0). Without MPI in the build, mpi_built() is false
// and the rest throws Error saying so.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/thread_comm.h"
#include "core/collective.h"

namespace weir {

bool mpi_built();
// Starts MPI (once per process, threads serialized: the CPU backend's pool
// thread makes the calls) and returns MPI_COMM_WORLD as a group. Sums are
// gathered and added in rank order on every rank, so all ranks get the same
// bits (MPI's own reductions do not promise that); a collective that waits
// past the timeout aborts the job.
std::unique_ptr<Collective> make_mpi_world(const CommOptions& o = {});
// Bytes from rank 0 to every rank (NCCL's unique id).
void mpi_broadcast(void* data, size_t n);
// Ends the job: every process of it (a rank failed).
[[noreturn]] void mpi_abort(int code);
// After the last collective, on every rank (nothing if MPI never started).
void mpi_finish();

}  // namespace weir
