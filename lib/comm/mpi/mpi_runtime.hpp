// MpiRuntime: owns MPI_Init_thread and MPI_Finalize for this process (chapter 04).
// MPI can be initialised once per process and never again after MPI_Finalize, so exactly one
// MpiRuntime may live at a time, and it must outlive every MpiCommunicator (they free their MPI
// communicators in their destructors). The easy thing to get wrong: finalising while another
// rank still waits on this one; MPI_Finalize is collective in practice, so finalise on every rank.
#pragma once

namespace tinyscale::comm {

/// RAII owner of the MPI library in this process: initialises MPI in the constructor and
/// finalises it in the destructor. It asks for MPI_THREAD_SERIALIZED, or for MPI_THREAD_MULTIPLE
/// when TINYSCALE_MPI_PROGRESS=thread is set at that moment: the collective threads
/// (mpi_collective_thread.hpp) call MPI while the rank's own thread does too. The collective
/// thread is opt-in because Debian's Open MPI 4.1.4 corrupted its heap once in about 110 launches
/// under MPI_THREAD_MULTIPLE (inside the first MPI_Comm_dup, with the cores busy), which was
/// never seen before the runtime asked for that level.
class MpiRuntime {
public:
  /// Initialises MPI; an Error when another MpiRuntime lives or MPI was already finalised.
  MpiRuntime();
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  /// This process's rank in MPI_COMM_WORLD.
  int world_rank() const { return world_rank_; }
  /// The number of processes in MPI_COMM_WORLD.
  int world_size() const { return world_size_; }

  /// True when MPI_THREAD_MULTIPLE was asked for and granted (several threads may call MPI at
  /// once).
  bool thread_multiple() const { return thread_multiple_; }

  /// The MpiRuntime alive in this process, or nullptr when there is none.
  static MpiRuntime* live();

private:
  int world_rank_ = 0;
  int world_size_ = 1;
  bool thread_multiple_ = false;
};

} // namespace tinyscale::comm
