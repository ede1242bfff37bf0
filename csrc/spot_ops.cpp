// The module init of `spot_kernels._C` (the pattern of pytorch/extension-cpp): importing the module loads this
// library, whose static initialisers run the TORCH_LIBRARY_IMPL registrations of csrc/cpu/<family>.cpp (always
// built) and csrc/cuda/<family>.cu (when CUDA is).
//
// No op schema is written in C++: every `torch.ops.spot.*` schema, public (`spot::<op>`) and private
// (`spot::_<op>_cpu`, `spot::_<op>_cuda`: the public schema without `backend`), is defined once, in Python, by
// spot_kernels/registry.py from the `SCHEMAS` of spot_kernels/ops/<family>.py. The dispatcher accepts an impl
// registered before its schema and checks the kernel's inferred signature against the schema when the definition
// arrives (tests/ops/test_registry.py covers both). The public ops are implemented by the Python router
// (spot_kernels/registry.py), which validates arguments and picks a backend.

// Python.h only provides the module init below; it must come before any other include.
#include <Python.h>

#include "cpu/simd.h"

#ifndef SPOT_WITH_CUDA
#define SPOT_WITH_CUDA 0
#endif

namespace {

// cpu_simd_level() -> "default" | "avx2" | "avx512": the SIMD level the CPU kernels run at in this process
// (csrc/cpu/simd.h: ATen's level, ATEN_CPU_CAPABILITY honoured).
PyObject* cpu_simd_level(PyObject*, PyObject*) {
  return PyUnicode_FromString(spot_cpu::simd_name(spot_cpu::simd_level()));
}

PyMethodDef methods[] = {{"cpu_simd_level", cpu_simd_level, METH_NOARGS, "SIMD level of the CPU kernels"},
                         {nullptr, nullptr, 0, nullptr}};

}  // namespace

extern "C" {
// A minimal module. WITH_CPU / WITH_CUDA tell spot_kernels.backends which kernel folders were compiled in;
// CPU_SIMD_LEVELS the SIMD levels the CPU kernels were built for (comma-separated).
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "C++ CPU and CUDA kernels of the torch.ops.spot ops",
                                          -1, methods};
  PyObject* module = PyModule_Create(&module_def);
  if (module != nullptr && (PyModule_AddIntConstant(module, "WITH_CPU", 1) != 0 ||
                            PyModule_AddIntConstant(module, "WITH_CUDA", SPOT_WITH_CUDA) != 0 ||
                            PyModule_AddStringConstant(module, "CPU_SIMD_LEVELS", spot_cpu::simd_levels_built()) != 0)) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
}
