// The op schemas of torch_segops, in one place. Kernels are registered per backend in cpu/ and cuda/.
#include <torch/csrc/stable/library.h>

#include "reduction_table.h"

STABLE_TORCH_LIBRARY(torch_segops, m) {
  // One op per reduction (reduction_table.h): segment_sum, segment_mean, segment_logsumexp, segment_mul
  // (src, indptr) -> Tensor; segment_min, segment_max (src, indptr) -> (Tensor, Tensor), the second output the
  // argmin/argmax (absolute positions along dim, src.size(dim) for empty segments). Their out= forms
  // segment_<name>_out write into the caller's contiguous tensors (out= of the Python API, when no
  // gradient is recorded): (src, indptr, out) and, for min/max, (src, indptr, out, arg).
  // scatter_<name>(src, index, size, sorted): the same reduction of src's rows by their target in index
  // (along dim = index.dim() - 1, index's leading dims src's or 1; size rows out, -1: max(index) + 1), each
  // target's rows folded in their order in src, bitwise as segment_<name> folds them on the stably sorted
  // index; min/max's arg is the position in src. sorted: an index that is not sorted (non-decreasing along
  // its last dim) is an error. scatter_<name>_plan(src, perm, indptr): the same along a scatter_plan.
  torch_segops::for_each_reduce([&](auto r) {
    using Op = torch_segops::Reduction<decltype(r)::value>;
    m.def(Op::schema);
    m.def(Op::out_schema);
    m.def(Op::scatter_schema);
    m.def(Op::scatter_plan_schema);
  });
  // size: rows of the output along dim; -1 reads max(indptr[..., -1]) from indptr (a host sync on GPU).
  m.def("gather_csr(Tensor src, Tensor indptr, SymInt size) -> Tensor");
  // The same, written into the caller's contiguous tensor: its rows are out.size(dim).
  m.def("gather_csr_out(Tensor src, Tensor indptr, Tensor(a!) out) -> ()");
  m.def("segment_softmax(Tensor src, Tensor indptr) -> Tensor");
  // COO -> CSR: indptr[..., i] = how many entries of index's last dim are < i, for i in [0, size]
  // (shape index.shape[:-1] + (size + 1,), int64); size -1 reads max(index) + 1 (a host sync on GPU).
  // index must hold values in [0, size), non-decreasing along its last dim when check_sorted. One pass
  // over index (cpu/coo_cpu.cpp, cuda/coo_cuda.cu): it raises on the CPU; on CUDA, where that would need
  // a host sync, a bad row gets first offset -1, which the CSR op it feeds reports through its
  // asynchronous indptr check.
  m.def("index_to_indptr(Tensor index, SymInt size, bool check_sorted) -> Tensor");
  // The stable order of index along its last dim for scatter (CPU): (perm, indptr) with perm [*lead, N]
  // int64 (a counting sort) and indptr the offsets of the sorted index as index_to_indptr gives them;
  // perm is [*lead, 0] when index is already sorted (nothing to permute). Values must be in [0, size).
  m.def("index_sort(Tensor index, SymInt size) -> (Tensor, Tensor)");
  // gather_coo in one pass (CPU): out[..., e, :] = src[..., index[..., e], :] along dim = index.dim() - 1,
  // index's leading dims equal to src's; index validated in the same pass (in [0, src.size(dim)), and
  // sorted when check_sorted; scatter permutes src's rows with an unsorted one).
  m.def("gather_index(Tensor src, Tensor index, bool check_sorted) -> Tensor");
  // Gradient of segment_softmax given its output y: y * (grad - segment_sum(grad * y)) per segment.
  m.def("segment_softmax_backward(Tensor grad, Tensor out, Tensor indptr) -> Tensor");
}
