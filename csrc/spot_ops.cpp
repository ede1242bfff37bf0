// The `torch.ops.spot.*` op schemas (docs/ops.md).
//
// Only schemas live here: the public ops are implemented by the Python router in spot_kernels/_library.py,
// which validates arguments and picks a backend (reference, Triton, or a CUDA kernel). CUDA kernels are added as
// csrc/cuda/<family>.cu files that define the private op `spot::_<op>_cuda` (this op's schema without `backend`)
// with TORCH_LIBRARY_FRAGMENT and register it for the CUDA key; spot_kernels/backends.py finds them by name.
//
// The strings must stay identical to spot_kernels/schemas.py (tests/test_registry.py checks both the text here and
// the schemas registered at run time).

// Python.h only provides the module init below, so that `from spot_kernels import _C` loads this library
// (the pattern of pytorch/extension-cpp); it must come before any other include.
#include <Python.h>

#include <torch/library.h>

TORCH_LIBRARY(spot, m) {
  m.def(R"spot(noise_uniform(int seed, Tensor rows, Tensor positions, Tensor steps, Tensor vocab_ids, str backend="auto") -> Tensor)spot");
  m.def(R"spot(score(Tensor logits, Tensor masked, int seed, Tensor rows, Tensor block_start, Tensor steps, float temperature, str confidence="prob", int top_k=32, str backend="auto") -> (Tensor tokens, Tensor confidence, Tensor topk_probs, Tensor topk_ids, Tensor commit_pos))spot");
  m.def(R"spot(select_children(Tensor position_logits, Tensor masked, Tensor path_logprob, Tensor stale_topk_probs, Tensor stale_topk_ids, int seed, Tensor rows, Tensor block_start, Tensor steps, float temperature, int k, str backend="auto") -> (Tensor child_pos, Tensor child_logprob, Tensor child_tokens))spot");
  m.def(R"spot(tree_mask(Tensor key_start, int prefix_len, int num_new, int num_nodes, int block_size, str backend="auto") -> Tensor)spot");
  m.def(R"spot(tree_mask_additive(Tensor key_start, int prefix_len, int num_new, int num_nodes, int block_size, ScalarType dtype, str backend="auto") -> Tensor)spot");
  m.def(R"spot(tree_mask_packed(Tensor key_start, int prefix_len, int num_new, int num_nodes, int block_size, str backend="auto") -> Tensor)spot");
  m.def(R"spot(tree_position_ids(Tensor key_start, int prefix_len, int num_new, int num_nodes, int block_size, str backend="auto") -> Tensor)spot");
  m.def(R"spot(verify_tree(Tensor parents, Tensor draft_pos, Tensor draft_tokens, Tensor target_pos, Tensor target_tokens, Tensor block, str backend="auto") -> (Tensor accepted_pos, Tensor accepted_tokens, Tensor num_accepted, Tensor new_block, Tensor last_node))spot");
  m.def(R"spot(tree_attention(Tensor q, Tensor k_prefix, Tensor v_prefix, Tensor k_nodes, Tensor v_nodes, Tensor key_start, float? scale=None, str backend="auto") -> Tensor)spot");
}

#ifndef SPOT_WITH_CUDA
#define SPOT_WITH_CUDA 0
#endif

extern "C" {
// A minimal module: importing it runs the static registrations above. WITH_CUDA tells spot_kernels.backends
// whether csrc/cuda/*.cu were compiled in.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "torch.ops.spot schemas and CUDA kernels",
                                          -1, nullptr};
  PyObject* module = PyModule_Create(&module_def);
  if (module != nullptr && PyModule_AddIntConstant(module, "WITH_CUDA", SPOT_WITH_CUDA) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
}
