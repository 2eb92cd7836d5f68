# launch/cluster_env.sh: the environment a multi-node run needs, sourced by launch/slurm/train_job.sh
# and launch/mpirun/train_hosts.sh before they start the ranks. Every line keeps a value you
# already exported, so set yours in the job script, or edit the defaults here for your cluster.
# The names are those of NCCL 2 and Open MPI 4; `ip -br addr` and `ibv_devinfo` on a compute node
# show the interfaces and InfiniBand adapters it has.

# NCCL (train.device = "cuda", backend nccl):
# - NCCL_DEBUG=INFO prints, on every rank, the transport NCCL chose for each peer (NVLink "P2P",
#   "SHM", InfiniBand "NET/IB", or sockets "NET/Socket"): the first thing to read when a multi-node
#   run is slow or hangs. WARN prints only problems.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# - NCCL_SOCKET_IFNAME: the interface NCCL's bootstrap (and its socket transport) uses between
#   nodes; a docker0 or a management network picked by mistake is a classic hang. A prefix
#   matches (ib matches ib0, ib1); ^ excludes. Unset, NCCL picks one itself (ib* first).
# export NCCL_SOCKET_IFNAME=ib0
# - NCCL_IB_HCA: which InfiniBand adapters carry the traffic, e.g. mlx5_0,mlx5_1 (unset: all).
#   NCCL_IB_DISABLE=1 forces sockets (a cluster without InfiniBand, or to rule it out).
# export NCCL_IB_HCA=mlx5
# export NCCL_IB_DISABLE=1
# - NCCL_ASYNC_ERROR_HANDLING is PyTorch's; tinyscale's own deadline (comm.timeout_s) names the
#   rank that went silent instead (chapter 12).

# Open MPI (the mpi backend, and the bootstrap of nccl):
# - the interfaces its TCP transport uses between nodes. Its default is every interface but the
#   loopback, which hangs when one of them (docker0, a virtual bridge) is not routable between
#   the nodes: name the good one, or exclude the bad ones (keep lo in an exclude list).
# export OMPI_MCA_btl_tcp_if_include=eth0
# export OMPI_MCA_btl_tcp_if_exclude=lo,docker0
# - the same for mpirun's own daemons and the startup exchange (a hang before anything prints):
# export OMPI_MCA_oob_tcp_if_include=eth0
# - on InfiniBand, Open MPI 4 carries MPI messages over UCX (its pml ucx) where it was built with
#   it; UCX_NET_DEVICES names the adapter port, e.g. mlx5_0:1 (`ucx_info -d` lists them).
# export UCX_NET_DEVICES=mlx5_0:1
# - no busy-polling while a rank waits (ranks share cores on a CPU node):
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
