// The MPI interface in a build without MPI (comm/mpi_comm.h).
#include <cstdlib>

#include "comm/mpi_comm.h"
#include "core/error.h"

namespace weir {

bool mpi_built() { return false; }
std::unique_ptr<Collective> make_mpi_world(const CommOptions&) {
  throw Error("this weir was built without MPI (install libopenmpi-dev and build again)");
}
void mpi_broadcast(void*, size_t) { throw Error("this weir was built without MPI"); }
void mpi_abort(int code) { std::_Exit(code); }
void mpi_finish() {}

}  // namespace weir
