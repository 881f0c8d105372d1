# mxop - one Makefile for the whole build.  Outputs go to build/.
#
#   make            daemon, worker, libmxop, example plugins, tests
#   make demo       the main job: train a small network through mxop
#   make check      every test (Criterion, then pytest)
#   make bench      the benchmarks
#   make install    PREFIX=/usr/local DESTDIR= (make uninstall removes exactly that)
#   make deb        Debian packages in build/deb/ (dpkg-deb)
#
# User CFLAGS/LDFLAGS are left alone; the project's flags live apart.
# SANITIZE=address,undefined builds everything with those sanitizers.
# V=1 shows the commands.

PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
LIBEXECDIR ?= $(PREFIX)/libexec/mxop
PLUGINDIR  ?= $(PREFIX)/lib/mxop/plugins
SYSCONFDIR ?= $(PREFIX)/etc
DATADIR    ?= $(PREFIX)/share
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
# The Python package (with its C extensions), where this prefix's python3 looks:
# Debian's own /usr/lib/python3/dist-packages, else PREFIX/lib/python3.N/dist-packages.
PYTHON_VER := $(shell /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR  ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/lib/python3/dist-packages,$(PREFIX)/lib/python$(PYTHON_VER)/dist-packages)
DESTDIR    ?=
# The Python tests and the bindings' C/C++ extensions use one interpreter: by
# default the virtual environment $(VENV), made on demand (python/requirements.txt:
# torch 2.13, numpy, pytest) with $(VENV_PYTHON) and no system site-packages.
# PYTHON=/usr/bin/python3 builds and tests against Debian's numpy and torch 1.13.
VENV       ?= build/venv
VENV_PYTHON ?= python3
PYTHON     ?= $(VENV)/bin/python3

CC       ?= cc
CFLAGS   ?= -O2 -g
LDFLAGS  ?=
PROTOC_C ?= protoc-c
PKG_CONFIG ?= pkg-config
CXX      ?= g++
CXXFLAGS ?= -O2 -g

# A sanitizer build lives in its own tree, so that switching SANITIZE on and
# off never mixes objects built with and without it.
comma := ,
ifeq ($(SANITIZE),)
B ?= build
else
B ?= build/sanitize-$(subst $(comma),-,$(SANITIZE))
endif
VERSION := $(shell sed -n 's/^\#define MXOP_VERSION_STRING "\(.*\)"/\1/p' include/mxop/client.h)

ifeq ($(V),1)
Q :=
else
Q := @
endif

SAN_FLAGS :=
ifneq ($(SANITIZE),)
SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

# Flags for our own code.  Generated protobuf-c code gets the same minus -Werror.
WARN      := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -fPIC -pthread -Iinclude -I. -I$(B)/gen \
               -MMD -MP $(SAN_FLAGS) \
               -DMXOP_LIBEXECDIR='"$(LIBEXECDIR)"'
MX_CFLAGS := $(BASE_CFLAGS) $(WARN) -Werror
GEN_CFLAGS := $(BASE_CFLAGS) -w
MX_LDFLAGS := $(SAN_FLAGS) -pthread

UV_LIBS   := -luv
PB_LIBS   := -lprotobuf-c
BLAS_LIBS := -lopenblas
CRIT_LIBS := -lcriterion
# Example op libraries: -O3 lets gcc vectorise their elementwise loops (at -O2
# its cost model keeps loops of unknown length scalar).
PLUGIN_OPT ?= -O3

# CUDA: found when nvcc is on PATH or at /usr/local/cuda/bin/nvcc; CUDA=0 or
# CUDA=1 overrides.  With it the CUDA op libraries (plugins/*.cu and
# tests/plugins/*.cu) are built with nvcc.  The worker and libmxop are the
# same binaries either way: they load the CUDA runtime, cuBLAS and the
# driver with dlopen when a device region first appears (see
# server/worker/cuda.c), so that they run, and answer "no CUDA device",
# where CUDA is missing.
NVCC_FOUND := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA ?= $(if $(NVCC_FOUND),1,0)
NVCC ?= $(or $(NVCC_FOUND),nvcc)
CUDA_HOME ?= $(or $(patsubst %/bin/,%,$(dir $(realpath $(NVCC_FOUND)))),/usr/local/cuda)
# SASS for Ampere and Hopper, PTX for everything from Turing on (JIT-compiled).
NVCC_ARCH ?= -gencode arch=compute_75,code=compute_75 -gencode arch=compute_80,code=sm_80 \
             -gencode arch=compute_90,code=sm_90
# The shared runtime, found through the rpath: the worker loads the same
# libcudart, so ops and worker share one runtime (streams, errors).
NVCC_FLAGS := -O3 -std=c++17 -Iinclude -shared -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter,-Werror \
              -cudart shared -Xlinker -rpath,$(CUDA_HOME)/lib64 $(NVCC_ARCH)
ifeq ($(CUDA),1)
ifeq ($(NVCC_FOUND)$(filter-out nvcc,$(NVCC)),)
$(error CUDA=1, but nvcc is neither on PATH nor at /usr/local/cuda/bin/nvcc (set NVCC=...))
endif
endif
ifeq ($(MAKELEVEL),0)
ifeq ($(CUDA),1)
$(info CUDA: yes ($(CUDA_HOME)))
else
$(info CUDA: no)
endif
endif

# ---------------------------------------------------------------------------
# Sources
PROTOS    := $(wildcard proto/*.proto)
GEN_C     := $(patsubst proto/%.proto,$(B)/gen/%.pb-c.c,$(PROTOS))
GEN_H     := $(GEN_C:.c=.h)
COMMON_C  := $(wildcard common/*.c) $(wildcard wire/*.c) $(wildcard shm/*.c)
DAEMON_C  := $(wildcard server/daemon/*/*.c)
WORKER_C  := $(wildcard server/worker/*.c) $(wildcard server/worker/mxnet/*.c)
# The MXNet compatibility layer's one C++ file (MXNet's random states are C++ objects).
WORKER_CC := $(wildcard server/worker/mxnet/*.cc)
CLIENT_C  := $(wildcard client/*.c)
PLUGIN_C  := $(wildcard plugins/*.c)
TPLUGIN_C := $(wildcard tests/plugins/*.c)
# C++ fixture libraries: the MXNet extension libraries of tests/test_mxnet.c.
TPLUGIN_CC := $(wildcard tests/plugins/*.cc)
PLUGIN_CU := $(wildcard plugins/*.cu)
TPLUGIN_CU := $(wildcard tests/plugins/*.cu)
TEST_C    := $(wildcard tests/test_*.c)
TESTLIB_C := $(filter-out $(TEST_C),$(wildcard tests/*.c))
DEMO_C    := $(wildcard demo/*.c)
BENCH_C   := $(wildcard bench/*.c)
# The `mxop` command: one file per subcommand.
CLI_C     := $(wildcard tools/mxop/*.c)

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))
GEN_O    := $(patsubst $(B)/gen/%.c,$(B)/obj/gen/%.o,$(GEN_C))
COMMON_O := $(call obj,$(COMMON_C)) $(GEN_O)
DAEMON_O := $(call obj,$(DAEMON_C))
WORKER_O := $(call obj,$(WORKER_C)) $(patsubst %.cc,$(B)/obj/%.o,$(WORKER_CC))
CLIENT_O := $(call obj,$(CLIENT_C))
CLI_O    := $(call obj,$(CLI_C))
# The public structs' layout checked by the C++ compiler too (common/abi_layout.h);
# an object that is built, never linked.
ABI_CXX_CHECK := $(B)/obj/common/abi_layout_hpp.o

DAEMON   := $(B)/bin/mxop-serverd
WORKER   := $(B)/bin/mxop-worker
CLI      := $(B)/bin/mxop
LIB_SO   := $(B)/lib/libmxop.so
LIB_A    := $(B)/lib/libmxop.a
INPROC_A := $(B)/lib/libmxop-inproc.a
PLUGINS  := $(patsubst plugins/%.c,$(B)/plugins/%.so,$(PLUGIN_C)) \
            $(patsubst plugins/%.cpp,$(B)/plugins/%.so,$(wildcard plugins/*.cpp))
TPLUGINS := $(patsubst tests/plugins/%.c,$(B)/tests/plugins/%.so,$(TPLUGIN_C)) \
            $(patsubst tests/plugins/%.cc,$(B)/tests/plugins/%.so,$(TPLUGIN_CC)) \
            $(patsubst tests/plugins/%.cpp,$(B)/tests/plugins/%.so,$(wildcard tests/plugins/*.cpp))
ifeq ($(CUDA),1)
CU_PLUGINS  := $(patsubst plugins/%.cu,$(B)/plugins/%.so,$(PLUGIN_CU))
CU_TPLUGINS := $(patsubst tests/plugins/%.cu,$(B)/tests/plugins/%.so,$(TPLUGIN_CU))
endif
TESTS    := $(patsubst tests/%.c,$(B)/tests/%,$(TEST_C))
DEMOS    := $(patsubst demo/%.c,$(B)/bin/%,$(DEMO_C))
BENCHES  := $(patsubst bench/%.c,$(B)/bin/%,$(BENCH_C))
PCS      := $(B)/mxop.pc $(B)/mxop-plugin.pc
# pkg-config prefers NAME-uninstalled.pc when it finds one, so that
# PKG_CONFIG_PATH=build works from the build tree before make install.
PCS_UNINST := $(B)/mxop-uninstalled.pc $(B)/mxop-plugin-uninstalled.pc
DEPS_OK  := $(B)/.deps-ok
# The Python bindings' C call path and torch.ops.mxop's C++ kernels, built
# against $(PYTHON)'s headers, NumPy and torch (see their rules below); with
# the default interpreter, after its virtual environment is made.
PYEXT_DEP := $(if $(filter $(VENV)/bin/python3,$(PYTHON)),$(VENV)/.ok)
FASTCALL := $(B)/python/_fastcall.so
TORCHOPS := $(B)/python/_torchops.so
NPALLOC := $(B)/python/_npalloc.so
TORCHALLOC := $(B)/python/_torchalloc.so
TORCH_BENCH_OP := $(B)/bench/torch_relu_op.so

.PHONY: all deps demo check check-c check-python test bench install uninstall clean \
        format format-check deb check-packages check-cluster python venv
.DEFAULT_GOAL := all

all: $(DAEMON) $(WORKER) $(CLI) $(LIB_SO) $(LIB_A) $(INPROC_A) $(PLUGINS) $(TPLUGINS) $(CU_PLUGINS) \
     $(CU_TPLUGINS) $(TESTS) $(DEMOS) $(BENCHES) $(PCS) $(PCS_UNINST) $(ABI_CXX_CHECK)

# The Python side: its interpreter (the virtual environment) and the C/C++
# extensions built against it.  Not part of `all`: the environment holds
# torch, which the C build does not need.
python: $(FASTCALL) $(TORCHOPS) $(NPALLOC) $(TORCHALLOC) $(TORCH_BENCH_OP)
venv: $(PYEXT_DEP)

# The virtual environment of the Python tests, remade when the requirements
# change.  Its stamp is written last, so that an interrupted install is
# made again from scratch (a virtual environment cannot be moved: its
# scripts name its path).
$(VENV)/.ok: python/requirements.txt | $(DEPS_OK)
	@$(if $(Q),echo "  VENV    $(VENV) (torch, numpy, pytest: python/requirements.txt)")
	$(Q)rm -rf $(VENV)
	$(Q)$(VENV_PYTHON) -m venv $(VENV)
	$(Q)$(VENV)/bin/python3 -m pip install -q --disable-pip-version-check \
	    -r python/requirements.txt
	$(Q)touch $@

# Installs the Debian packages the build needs, once per build tree.
deps: $(DEPS_OK)
$(DEPS_OK): scripts/install-deps.sh
	$(Q)sh scripts/install-deps.sh
	$(Q)mkdir -p $(@D) && touch $@

# Every object waits for the packages and the generated headers.
$(B)/gen/%.pb-c.c $(B)/gen/%.pb-c.h: proto/%.proto | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  PROTOC  $<")
	$(Q)$(PROTOC_C) --c_out=$(B)/gen -Iproto $<

$(B)/obj/gen/%.o: $(B)/gen/%.c $(GEN_H)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) $(GEN_CFLAGS) -c $< -o $@

$(B)/obj/%.o: %.c $(GEN_H) | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) $(MX_CFLAGS) -c $< -o $@

# C++ in the worker (server/worker/mxnet/cxx.cc): the house warnings, C++17.
$(B)/obj/%.o: %.cc | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CXX     $<")
	$(Q)$(CXX) $(CXXFLAGS) -std=c++17 -D_GNU_SOURCE -fPIC -pthread -Iinclude -I. -I$(B)/gen -MMD -MP \
	    $(SAN_FLAGS) $(filter-out -Wstrict-prototypes,$(WARN)) -Werror -c $< -o $@

$(DAEMON): $(DAEMON_O) $(COMMON_O)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(MX_LDFLAGS) $(LDFLAGS) $^ -o $@ $(UV_LIBS) $(PB_LIBS)

$(WORKER): $(WORKER_O) $(COMMON_O)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(MX_LDFLAGS) $(LDFLAGS) -rdynamic $^ -o $@ $(PB_LIBS) -lseccomp -ldl -lm -lstdc++

# The command is a client like any other: it links libmxop statically.
$(CLI): $(CLI_O) $(LIB_A)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(MX_LDFLAGS) $(LDFLAGS) $(CLI_O) $(LIB_A) -o $@ $(PB_LIBS) -lm -pthread

# Only the public API is exported (client/libmxop.map); libmxop.so.0 beside it is
# the soname link, so that programs linked from the build tree run against it.
$(LIB_SO): $(CLIENT_O) $(COMMON_O) client/libmxop.map
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(MX_LDFLAGS) $(LDFLAGS) -shared -Wl,-soname,libmxop.so.0 \
	    -Wl,--version-script=client/libmxop.map $(filter %.o,$^) -o $@ $(PB_LIBS)
	$(Q)ln -sfn libmxop.so $(@D)/libmxop.so.0

$(LIB_A): $(CLIENT_O) $(COMMON_O)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# Op libraries: the one-command build the op-author guide documents.
$(B)/plugins/%.so: plugins/%.c include/mxop/op.h include/mxop/types.h | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  PLUGIN  $@")
	$(Q)$(CC) $(CFLAGS) $(PLUGIN_OPT) -std=c11 -Iinclude $(WARN) -Werror -shared -fPIC $< -o $@ -lm

# -I.: a hostile fixture that forges the worker's shared pages (forge_note.c) includes
# their header, which includes others by their path from the top of the tree.
$(B)/tests/plugins/%.so: tests/plugins/%.c include/mxop/op.h include/mxop/types.h $(wildcard tests/plugins/*.h) | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  PLUGIN  $@")
	$(Q)$(CC) $(CFLAGS) -std=c11 -D_GNU_SOURCE -Iinclude -I. $(WARN) -Wno-error -shared -fPIC -pthread \
	    -MMD -MP -MF $(@:.so=.d) $< -o $@ -lm

# Built against the frozen previous plugin ABI (tests/test_abi.c), never the current op.h.
$(B)/tests/plugins/abi_prev.so: tests/plugins/abi_prev/op_prev.h

# C++ fixture libraries (MXNet extension libraries written here, exporting MXNet's C ABI).
$(B)/tests/plugins/%.so: tests/plugins/%.cc tests/plugins/mx_abi.h | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  PLUGIN  $@")
	$(Q)$(CXX) $(CXXFLAGS) -std=c++17 -Itests/plugins $(filter-out -Wstrict-prototypes,$(WARN)) -shared -fPIC $< -o $@

# CUDA op libraries (CUDA=1 only): one nvcc command, as the op-author guide shows.
# C++ op libraries (mxop/op.hpp): the same, with the C++ compiler.
CXX ?= c++
$(B)/plugins/%.so: plugins/%.cpp include/mxop/op.hpp include/mxop/op.h include/mxop/types.h | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  PLUGIN  $@")
	$(Q)$(CXX) $(CXXFLAGS) $(PLUGIN_OPT) -std=c++17 -Iinclude -Wall -Wextra -Wshadow -Werror -shared -fPIC $< -o $@

$(B)/tests/plugins/%.so: tests/plugins/%.cpp include/mxop/op.hpp include/mxop/op.h include/mxop/types.h | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  PLUGIN  $@")
	$(Q)$(CXX) $(CXXFLAGS) -O2 -std=c++17 -Iinclude -Wall -Wextra -Wshadow -Werror -shared -fPIC $< -o $@

$(B)/plugins/%.so: plugins/%.cu include/mxop/op.h include/mxop/types.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  NVCC    $@")
	$(Q)$(NVCC) $(NVCC_FLAGS) $< -o $@

$(B)/tests/plugins/%.so: tests/plugins/%.cu include/mxop/op.h include/mxop/types.h \
                        tests/plugins/mx_abi.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  NVCC    $@")
	$(Q)$(NVCC) $(NVCC_FLAGS) $< -o $@

# Where the worker looks for libcudart and libcublas after the loader's own path.
$(B)/obj/server/worker/cuda%.o: MX_CFLAGS += -DMXOP_CUDA_HOME='"$(CUDA_HOME)"'
# The gpu profile's minimal root binds that directory in where it lies outside /usr.
$(B)/obj/server/worker/namespaces.o: MX_CFLAGS += -DMXOP_CUDA_HOME='"$(CUDA_HOME)"'

TESTLIB_O := $(call obj,$(TESTLIB_C))
$(B)/obj/tests/%.o: MX_CFLAGS += -DMXOP_TEST_BUILD_DIR='"$(abspath $(B))"' -DMXOP_TEST_SOURCE_DIR='"$(CURDIR)"'
# The worker's objects but main, driven by inproc/ instead of the data
# channel: the op runtime for running op libraries in another process.
$(INPROC_A): $(filter-out $(B)/obj/server/worker/main.o,$(WORKER_O)) \
             $(B)/obj/inproc/inproc.o $(COMMON_O)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

# The in-process runner's test, and the worker's BLAS count's, link it
# alone: its worker objects share internal names with libmxop's client objects.
$(B)/tests/test_opkit_inproc $(B)/tests/test_blas_used: $(B)/tests/%: $(B)/obj/tests/%.o $(INPROC_A)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(MX_LDFLAGS) $(LDFLAGS) $^ -o $@ $(CRIT_LIBS) $(PB_LIBS) $(BLAS_LIBS) -lseccomp -lstdc++ -ldl -lm

$(B)/tests/test_%: $(B)/obj/tests/test_%.o $(TESTLIB_O) $(LIB_A)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(MX_LDFLAGS) $(LDFLAGS) $^ -o $@ $(CRIT_LIBS) $(PB_LIBS) -lm

$(B)/bin/%: $(B)/obj/demo/%.o $(LIB_A)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(MX_LDFLAGS) $(LDFLAGS) $^ -o $@ $(PB_LIBS) -lm

# The Python bindings' call path in C (python/mxop/_fastcall.c),
# built against Debian's python3-dev and NumPy's headers for $(PYTHON).  It
# links no libmxop: the package hands it libmxop's functions from the copy
# ctypes loaded, so one libmxop serves both paths.  Without Python.h it is
# left out, and the bindings take their ctypes path (as with MXOP_NO_FASTCALL=1).
$(B)/python/_fastcall.so: python/mxop/_fastcall.c include/mxop/client.h include/mxop/types.h \
                          $(PYEXT_DEP) | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  PYEXT   $@")
	$(Q)$(CC) $(CFLAGS) -std=c11 -D_GNU_SOURCE -Iinclude \
	    -I"$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
	    -I"$$($(PYTHON) -c 'import numpy; print(numpy.get_include())')" \
	    $(WARN) -Werror $(SAN_FLAGS) -shared -fPIC $< -o $@

# torch.ops.mxop's CPU and Autograd kernels in C++ (python/mxop/_torchops.cpp),
# against $(PYTHON)'s torch.  Like _fastcall.so it links no
# libmxop (it is handed libmxop's functions); when that interpreter has no
# torch it is left out, and the Python kernels serve (the package says so once).
# torch's include directories and lib/ come from the interpreter's torch
# (torch.utils.cpp_extension), and its C++ ABI flag with them; the library
# finds torch's libraries where torch itself loaded them (no rpath needed:
# torch is imported before it).
TORCH_FLAGS_PY := import torch, torch.utils.cpp_extension as e; \
    print(" ".join(["-isystem" + p for p in e.include_paths()] + \
    ["-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI), \
     "-L" + e.library_paths()[0]]))
$(B)/python/_torchops.so: python/mxop/_torchops.cpp include/mxop/client.h include/mxop/types.h \
                          $(PYEXT_DEP) | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CXX     $@")
	$(Q)flags=$$($(PYTHON) -c '$(TORCH_FLAGS_PY)' 2>/dev/null) || \
	    { echo "mxop: $(PYTHON) has no torch: torch.ops.mxop kernels stay in Python"; exit 0; }; \
	$(CXX) -std=c++20 -O2 -D_GNU_SOURCE -Iinclude $$flags -Wall -Wextra -Werror -shared -fPIC \
	    $< -o $@ -ltorch -ltorch_cpu -lc10

# mxop.allocator's two halves (python/mxop/allocator.py): NumPy's memory
# handler and the op outputs in shared-heap blocks (_npalloc.c, a CPython
# extension like _fastcall.so), and torch's CPU allocator (_torchalloc.cpp,
# loaded with ctypes like _torchops.so).  Neither links libmxop: both are
# handed its functions.  Without torch the second is left out, and
# mxop.allocator.enable(torch=True) says so.
$(NPALLOC): python/mxop/_npalloc.c include/mxop/client.h include/mxop/types.h \
            $(PYEXT_DEP) | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  PYEXT   $@")
	$(Q)$(CC) $(CFLAGS) -std=c11 -D_GNU_SOURCE -Iinclude \
	    -I"$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
	    -I"$$($(PYTHON) -c 'import numpy; print(numpy.get_include())')" \
	    $(WARN) -Werror $(SAN_FLAGS) -shared -fPIC $< -o $@

$(TORCHALLOC): python/mxop/_torchalloc.cpp include/mxop/client.h $(PYEXT_DEP) | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CXX     $@")
	$(Q)flags=$$($(PYTHON) -c '$(TORCH_FLAGS_PY)' 2>/dev/null) || \
	    { echo "mxop: $(PYTHON) has no torch: no torch allocator"; exit 0; }; \
	$(CXX) -std=c++20 -O2 -D_GNU_SOURCE -Iinclude $$flags -Wall -Wextra -Werror -shared -fPIC \
	    $< -o $@ -lc10

# The bench's in-process C++ custom op (bench/torch/relu_op.cpp), the
# yardstick of torch.ops.mxop.relu's cost (python -m mxop.bench --torch-call).
$(TORCH_BENCH_OP): bench/torch/relu_op.cpp $(PYEXT_DEP) | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CXX     $@")
	$(Q)flags=$$($(PYTHON) -c '$(TORCH_FLAGS_PY)' 2>/dev/null) || \
	    { echo "mxop: $(PYTHON) has no torch: no bench op"; exit 0; }; \
	$(CXX) -std=c++20 -O2 $$flags -Wall -Wextra -Werror -shared -fPIC \
	    $< -o $@ -ltorch -ltorch_cpu -lc10

# ---- JAX and the pip package ------------------------------------------
# mxop.jax's XLA FFI handler (python/mxop/_jaxffi.c) is C against the FFI
# headers jaxlib ships (jax.ffi.include_dir()), built against the JAX of
# $(PYTHON)'s environment (build/venv: python/requirements.txt): `make jax`.
# The handler links no libmxop and no Python (mxop.jax loads it with ctypes
# and hands it libmxop's functions).  bench/jax/ holds the benchmark's
# in-process FFI relu.  `make wheel` builds the pip package (pyproject.toml at
# the top); check-wheel is part of `make check`, and check-python runs
# tests/test_jax.py with the other binding tests (check-jax runs it alone).
JAX_PYTHON ?= $(PYTHON)
JAX_FFI_INCLUDE = $(shell $(JAX_PYTHON) -c 'import jax.ffi; print(jax.ffi.include_dir())' 2>/dev/null)
JAXFFI     := $(B)/python/_jaxffi.so
JAX_RELU   := $(B)/bench/libjax_inproc_relu.so

.PHONY: jax check-jax bench-jax wheel check-wheel wheel-parts

$(JAXFFI): python/mxop/_jaxffi.c include/mxop/client.h include/mxop/types.h $(PYEXT_DEP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  JAXFFI  $@")
	$(Q)$(CC) $(CFLAGS) -std=c11 -D_GNU_SOURCE -Iinclude -isystem $(JAX_FFI_INCLUDE) \
	    $(WARN) -Werror $(SAN_FLAGS) -shared -fPIC $< -o $@

$(JAX_RELU): bench/jax/inproc_relu.c $(PYEXT_DEP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  JAXFFI  $@")
	$(Q)$(CC) $(CFLAGS) -O3 -std=c11 -isystem $(JAX_FFI_INCLUDE) $(WARN) -Werror -shared -fPIC \
	    $< -o $@

jax: $(JAXFFI) $(JAX_RELU)

# The JAX tests, in the environment the other Python tests use.
check-jax: all python jax
	$(Q)MXOP_BUILD_DIR=$(abspath $(B)) PYTHONPATH=$(CURDIR)/python \
	    $(JAX_PYTHON) -m pytest -q -p no:cacheprovider python/tests/test_jax.py

# What the pip package carries from the build (setup.py's build_py runs this),
# and a variable's value for it (make print-B).
wheel-parts: $(DAEMON) $(WORKER) $(CLI) $(LIB_SO) $(PLUGINS)
print-%:
	@echo '$($*)'

# A wheel in $(B)/dist, built by `python -m build` in a fresh environment with
# jax and torch (so that its _jaxffi.so and _torchops.so are built), then
# installed into another fresh environment where the README's quick start
# and the binding tests run from outside the checkout (scripts/test-wheel.sh).
wheel check-wheel: all
	$(Q)sh scripts/test-wheel.sh $(abspath $(B)) $(if $(filter wheel,$@),build-only)

# The JAX rows of `make bench` alone.
bench-jax: all jax
	$(Q)sh bench/jax/run.sh $(abspath $(B)) $(JAX_PYTHON)

# Benchmarks share the helpers of bench/lib/ (not programs of their own).
$(B)/bin/%: $(B)/obj/bench/%.o $(patsubst %.c,$(B)/obj/%.o,$(wildcard bench/lib/*.c)) $(LIB_A)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(MX_LDFLAGS) $(LDFLAGS) $^ -o $@ $(PB_LIBS) $(BLAS_LIBS) -ldl -lm

$(B)/%.pc: scripts/%.pc.in include/mxop/client.h
	@mkdir -p $(@D)
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	        -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	        -e 's|@PLUGINDIR@|$(PLUGINDIR)|g' $< > $@

# The build tree's .pc files name their paths from their own directory
# (pkg-config's ${pcfiledir}), so that a checkout moved with its build still
# builds with them; PC_TOP is the source tree seen from $(B).
PC_TOP := $(shell realpath -m --relative-to=$(abspath $(B)) $(abspath .))
$(B)/%-uninstalled.pc: scripts/%.pc.in include/mxop/client.h Makefile
	@mkdir -p $(@D)
	$(Q)sed -e 's|@PREFIX@|$${pcfiledir}/$(PC_TOP)|g' -e 's|@LIBDIR@|$${pcfiledir}/lib|g' \
	        -e 's|@INCLUDEDIR@|$${pcfiledir}/$(PC_TOP)/include|g' -e 's|@VERSION@|$(VERSION)|g' \
	        -e 's|@PLUGINDIR@|$${pcfiledir}/plugins|g' $< > $@

# ---------------------------------------------------------------------------
# Fuzzing (libFuzzer, clang from Debian).  Every target and the code it
# reaches are built with clang under -fsanitize=fuzzer,address,undefined in
# their own tree, $(B)/fuzz.  `make fuzz FUZZ_SECONDS=N` runs each target N
# seconds from the seed corpus in tests/fuzz/corpus/<target>/ (new inputs go
# to $(B)/fuzz/work/, crashes to $(B)/fuzz/artifacts/); `make fuzz-smoke`
# (part of `make check`) runs each briefly.  `make fuzz-seeds` rewrites the
# seed corpus from tests/fuzz/seeds.c.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 15
FB           := $(B)/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := -g -O1 -std=c11 -D_GNU_SOURCE -pthread -Iinclude -I. -I$(B)/gen $(WARN) \
                -Wno-unknown-warning-option -Wno-missing-field-initializers -fsanitize=fuzzer-no-link $(FUZZ_SAN) \
                -DMXOP_LIBEXECDIR='"$(LIBEXECDIR)"' -DMXOP_FUZZ_PLUGINS='"$(abspath $(B))/plugins"'
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
# What each target links besides itself: the shared code, plus the worker
# (without its main) for the call target, the daemon's request checks for
# the control target, and libmxop's client code for the client target.
FUZZ_COMMON_O := $(patsubst %.c,$(FB)/obj/%.o,$(COMMON_C)) \
                 $(patsubst $(B)/gen/%.c,$(FB)/obj/gen/%.o,$(GEN_C))
# (the MXNet layer's one C++ object comes from the ordinary build: it is not fuzzed itself)
FUZZ_WORKER_O := $(patsubst %.c,$(FB)/obj/%.o,$(filter-out server/worker/main.c,$(WORKER_C))) \
                 $(patsubst %.cc,$(B)/obj/%.o,$(WORKER_CC))
FUZZ_DAEMON_O := $(patsubst %.c,$(FB)/obj/%.o,$(filter server/daemon/session/ctl_validate.c,$(DAEMON_C)))
FUZZ_CLIENT_O := $(patsubst %.c,$(FB)/obj/%.o,$(CLIENT_C))

.PHONY: fuzz fuzz-build fuzz-smoke fuzz-seeds

$(FB)/obj/gen/%.o: $(B)/gen/%.c $(GEN_H)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  FUZZCC  $<")
	$(Q)$(FUZZ_CC) $(filter-out $(WARN),$(FUZZ_CFLAGS)) -w -c $< -o $@

$(FB)/obj/%.o: %.c $(GEN_H) | $(DEPS_OK)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  FUZZCC  $<")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FB)/fuzz_frame: $(FB)/obj/tests/fuzz/fuzz_frame.o $(FUZZ_COMMON_O)
	@$(if $(Q),echo "  FUZZLD  $@")
	$(Q)$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) $^ -o $@ $(PB_LIBS) -pthread

$(FB)/fuzz_call: $(FB)/obj/tests/fuzz/fuzz_call.o $(FUZZ_WORKER_O) $(FUZZ_COMMON_O) | $(PLUGINS)
	@$(if $(Q),echo "  FUZZLD  $@")
	$(Q)$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -rdynamic $^ -o $@ $(PB_LIBS) -lseccomp -lstdc++ -ldl -lm -pthread

$(FB)/fuzz_control: $(FB)/obj/tests/fuzz/fuzz_control.o $(FUZZ_DAEMON_O) $(FUZZ_COMMON_O)
	@$(if $(Q),echo "  FUZZLD  $@")
	$(Q)$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) $^ -o $@ $(PB_LIBS) -pthread

$(FB)/fuzz_client: $(FB)/obj/tests/fuzz/fuzz_client.o $(FUZZ_CLIENT_O) $(FUZZ_COMMON_O)
	@$(if $(Q),echo "  FUZZLD  $@")
	$(Q)$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) $^ -o $@ $(PB_LIBS) -ldl -pthread

fuzz-build: $(addprefix $(FB)/,$(FUZZ_TARGETS))

fuzz: fuzz-build
	$(Q)sh scripts/fuzz.sh $(abspath $(FB)) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-smoke: fuzz-build
	$(Q)sh scripts/fuzz.sh $(abspath $(FB)) $(FUZZ_SMOKE_SECONDS) $(FUZZ_TARGETS)

fuzz-seeds: $(COMMON_O)
	$(Q)$(CC) $(CFLAGS) $(MX_CFLAGS) tests/fuzz/seeds.c $(COMMON_O) -o $(B)/fuzz-seeds $(PB_LIBS)
	$(Q)$(B)/fuzz-seeds tests/fuzz/corpus

# ---------------------------------------------------------------------------
demo: all
	$(Q)sh scripts/demo.sh $(abspath $(B))

check: fuzz-smoke check-c check-python check-packages check-cluster check-wheel
test: check

check-c: all
	$(Q)sh scripts/run-c-tests.sh $(abspath $(B))

# Kubernetes manifests, Slurm prolog/epilog, upgrade and two-node runs (scripts/test-cluster.sh).
check-cluster: all python
	$(Q)PYTHON=$(abspath $(PYTHON)) sh scripts/test-cluster.sh $(abspath $(B))

check-python: all python jax
	$(Q)if [ -d python/tests ]; then sh scripts/run-python-tests.sh $(abspath $(B)) $(abspath $(PYTHON)); fi

bench: all python jax
	$(Q)PYTHON=$(abspath $(PYTHON)) sh scripts/bench.sh $(abspath $(B))

# The packages: install/uninstall into a temporary root, the exported symbols,
# the .pc files, and `make deb`'s packages unpacked and run (scripts/test-packages.sh).
check-packages: all python
	$(Q)sh scripts/test-packages.sh $(abspath $(B)) $(abspath $(PYTHON))

# scripts/install.sh records what it installs in $(DATADIR)/mxop/install-manifest;
# uninstall removes exactly that.
INSTALL_ENV = DESTDIR='$(DESTDIR)' PREFIX='$(PREFIX)' BINDIR='$(BINDIR)' LIBDIR='$(LIBDIR)' \
              INCLUDEDIR='$(INCLUDEDIR)' LIBEXECDIR='$(LIBEXECDIR)' PLUGINDIR='$(PLUGINDIR)' \
              SYSTEMDUNITDIR='$(SYSTEMDUNITDIR)' SYSCONFDIR='$(SYSCONFDIR)' DATADIR='$(DATADIR)' \
              B='$(B)' VERSION='$(VERSION)' PYTHONDIR='$(PYTHONDIR)'

install: $(DAEMON) $(WORKER) $(CLI) $(LIB_SO) $(LIB_A) $(INPROC_A) $(PLUGINS) $(CU_PLUGINS) \
         $(FASTCALL) $(TORCHOPS) $(NPALLOC) $(TORCHALLOC)
	$(Q)$(INSTALL_ENV) sh scripts/install.sh install

uninstall:
	$(Q)$(INSTALL_ENV) sh scripts/install.sh uninstall

# Debian packages (dpkg-deb): mxop-serverd (daemon, worker, mxop, units, example
# plugins), libmxop0, libmxop-dev (headers, .pc, static libraries), python3-mxop.
deb: $(DAEMON) $(WORKER) $(CLI) $(LIB_SO) $(LIB_A) $(INPROC_A) $(PLUGINS) $(CU_PLUGINS) \
     $(FASTCALL) $(TORCHOPS)
	$(Q)sh scripts/make-deb.sh $(abspath $(B)) $(VERSION)

FORMAT_SRC = $(filter-out $(B)/%,$(shell git ls-files '*.c' '*.h' 2>/dev/null))
format:
	clang-format -i $(FORMAT_SRC)
format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

# ---- MXNet calling mxop (docs/mxnet.md): the proxy extension library, MXNet's venv, its tests ----
# libmxop_mxnet.so: mx.library.load()s it; libmxop is linked in (static, hidden), and
# only lib_api's entry points are exported (mxnet_proxy/exports.map).
MXPROXY_O := $(call obj,$(wildcard mxnet_proxy/*.c)) $(patsubst %.cc,$(B)/obj/%.o,$(wildcard mxnet_proxy/*.cc))
MXPROXY   := $(B)/lib/libmxop_mxnet.so
all: $(MXPROXY)
$(MXPROXY): $(MXPROXY_O) $(LIB_A) mxnet_proxy/exports.map
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(MX_LDFLAGS) $(LDFLAGS) -shared -Wl,--version-script=mxnet_proxy/exports.map \
	    -Wl,--exclude-libs,ALL $(MXPROXY_O) $(LIB_A) -o $@ $(PB_LIBS) -ldl -lstdc++
# MXNet 1.9.1 in a virtual environment of its own (about 310 MB), made on demand:
# that release needs numpy < 1.24.  MXNET_PYTHON: the interpreter it is made with.
MXNET_PYTHON ?= python3
MXNET_VENV   ?= $(B)/mxnet-venv
$(MXNET_VENV)/.ok:
	$(Q)$(MXNET_PYTHON) -m venv $(MXNET_VENV)
	$(Q)$(MXNET_VENV)/bin/pip install -q 'mxnet==1.9.1' 'numpy<1.24' pytest
	$(Q)touch $@
mxnet-venv: $(MXNET_VENV)/.ok
# MXNet's own example extension libraries, built unchanged, only from a source tree
# given as MXNET_SRC=/path/to/mxnet (nothing of it is in this repository).
MXNET_SRC ?=
MXNET_EX  := $(B)/mxnet-examples
MXNET_EXAMPLES := $(if $(MXNET_SRC),$(MXNET_EX)/libgemm_lib.so $(MXNET_EX)/libtransposecsr_lib.so \
                  $(MXNET_EX)/libinit_lib.so)
$(MXNET_EX)/lib%_lib.so: $(MXNET_SRC)/example/extensions/lib_custom_op/%_lib.cc
	@mkdir -p $(@D)
	$(Q)$(CXX) -shared -fPIC -std=c++11 $< $(MXNET_SRC)/src/lib_api.cc -o $@ -I$(MXNET_SRC)/include
$(MXNET_EX)/libinit_lib.so: $(MXNET_SRC)/example/extensions/lib_api/init_lib.cc
	@mkdir -p $(@D)
	$(Q)$(CXX) -shared -fPIC -std=c++11 $< $(MXNET_SRC)/src/lib_api.cc -o $@ -I$(MXNET_SRC)/include
check-mxnet: all $(MXNET_VENV)/.ok $(MXNET_EXAMPLES)
	$(Q)$(if $(MXNET_SRC),MXOP_MXNET_EXAMPLES=$(abspath $(MXNET_EX))) \
	    sh scripts/run-mxnet-tests.sh $(abspath $(B)) $(abspath $(MXNET_VENV))
check: check-mxnet
bench-mxnet: all $(MXNET_VENV)/.ok
	$(Q)MXOP_BUILD_DIR=$(abspath $(B)) PYTHONPATH=$(CURDIR)/python $(MXNET_VENV)/bin/python \
	    python/tests/mxnet_proxy/bench_proxy.py
.PHONY: mxnet-venv check-mxnet bench-mxnet

clean:
	rm -rf $(B)

# Keep the generated sources (make would otherwise delete them as intermediates).
.SECONDARY:

# A hostile fixture may include the project's own headers (the mailbox's layout): its .d
# rebuilds it when they change.
-include $(shell find $(B)/obj $(B)/fuzz/obj $(B)/tests/plugins -name '*.d' 2>/dev/null)
