# ctest entries of mpi_tests (label mpi): the test binary under mpiexec with 4 ranks on however
# many cores there are (--oversubscribe), one entry per Catch2 tag. Idle ranks yield the core
# (mpi_yield_when_idle) so that oversubscribed runs stay fast on 2 cores. RUN_SERIAL: 4 processes
# already fill the cores, and the tests' short deadlines should not race other tests for them.
set(TINYSCALE_MPI_TAGS collectives p2p async collective_thread split deadline checking ring dp tp ep zero pp cp
    recompute llama)
foreach(tag IN LISTS TINYSCALE_MPI_TAGS)
  add_test(NAME mpi.${tag}
           COMMAND ${TINYSCALE_MPIEXEC} --oversubscribe -np 4 $<TARGET_FILE:mpi_tests> "[${tag}]")
  set_tests_properties(mpi.${tag} PROPERTIES
    LABELS mpi
    RUN_SERIAL ON
    TIMEOUT 120
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
# The collective thread is opt-in (lib/comm/mpi/mpi_runtime.hpp): its tests start MPI with it.
set_property(TEST mpi.collective_thread APPEND PROPERTY ENVIRONMENT "TINYSCALE_MPI_PROGRESS=thread")

# Chapter 10's composed runs need 8 ranks (dp2 x tp2 x pp2): their own entry, -np 8.
add_test(NAME mpi.4d
         COMMAND ${TINYSCALE_MPIEXEC} --oversubscribe -np 8 $<TARGET_FILE:mpi_tests> "[4d]")
set_tests_properties(mpi.4d PROPERTIES
  LABELS mpi
  RUN_SERIAL ON
  TIMEOUT 180
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1")

# Chapter 12: a rank that dies in the middle of training (the script runs mpiexec itself, with and
# without --enable-recovery, and checks what every surviving rank reports).
add_test(NAME mpi.dead_rank
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/dead_rank.sh ${TINYSCALE_MPIEXEC}
                 $<TARGET_FILE:mpi_tests>)
set_tests_properties(mpi.dead_rank PROPERTIES
  LABELS mpi
  RUN_SERIAL ON
  TIMEOUT 300
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1")
