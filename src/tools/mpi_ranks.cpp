#include "tools/mpi_ranks.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "comm/mpi_comm.h"

namespace weir::tools {
namespace {

std::unique_ptr<Collective> g_world;
FILE* g_errors = nullptr;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}

}  // namespace

bool launched_by_mpirun() {
  return env_int("OMPI_COMM_WORLD_SIZE") > 1 || env_int("PMI_SIZE") > 1 || env_int("PMIX_SIZE") > 1;
}

void start_mpi_ranks() {
  g_world = make_mpi_world();
  if (g_world->rank() == 0) return;
  const int keep = ::dup(STDERR_FILENO);
  if (keep >= 0) g_errors = ::fdopen(keep, "w");
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) {
    std::fflush(stdout);
    std::fflush(stderr);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::close(null);
  }
}

Collective* mpi_world() { return g_world.get(); }

int mpi_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMIX_LOCAL_RANK"})
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  return g_world ? g_world->rank() : 0;
}

FILE* error_stream() { return g_errors ? g_errors : stderr; }

void end_mpi_ranks(int exit_code) {
  if (!g_world) return;
  std::fflush(stdout);
  if (exit_code != 0) {
    std::fflush(error_stream());
    mpi_abort(exit_code);
  }
  g_world.reset();
  mpi_finish();
}

}  // namespace weir::tools
