// weir under mpirun: every process is one rank of a tensor-parallel group
// (MPI_COMM_WORLD). Rank 0 speaks; the others' standard output and error
// go to /dev/null, and their errors to the error stream they had.
#pragma once
#include <cstdio>

#include "core/collective.h"

namespace weir::tools {

// Whether this process was started by mpirun with more than one process
// (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_SIZE > 1).
bool launched_by_mpirun();
// Starts MPI and silences the ranks other than 0; call once, first. Throws
// Error when this weir was built without MPI.
void start_mpi_ranks();
// The world's collectives, or null when not under mpirun.
Collective* mpi_world();
// This process's rank among those of its host (OMPI_COMM_WORLD_LOCAL_RANK,
// MPI_LOCALRANKID or PMIX_LOCAL_RANK; else its world rank): the GPU it
// takes by default.
int mpi_local_rank();
// Where errors go (the rank's own standard error, even when silenced).
FILE* error_stream();
// Ends MPI: after a command that succeeded, or the whole job after one that
// failed on this rank (the others may be waiting for it).
void end_mpi_ranks(int exit_code);

}  // namespace weir::tools
