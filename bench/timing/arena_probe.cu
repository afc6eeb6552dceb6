// kiln-arena-probe: does a kernel's time depend on which device allocation its input sits in?
//
// Loads a kernel built to Kiln's ABI (a one-input, one-output kernel such as cuda_reduce_sum's), makes
// --arenas separate allocations of --bytes each, and times the kernel on its input in every one of them,
// the arenas taking turns round by round (so drift in the GPU's clocks falls on all of them alike). Each
// arena's median and spread go out as one JSON line, with where the allocation sits in the process's
// address space. The allocation modes:
//   malloc    cudaMalloc of exactly --bytes (as the CUDA evaluator's arenas are: a case plus its slack)
//   malloc2m  cudaMalloc rounded up to 2 MiB
//   vmm       cuMemCreate + cuMemMap at the device's recommended granularity
//   ipc       cudaMalloc in a parent process, timed in a child that maps it through CUDA IPC and was
//             forked before either made a CUDA call (as the evaluator hands arenas to its runners)
//   ipc2m, vmmipc, child: see run_two_processes()
//
//   kiln-arena-probe --kernel k.so --bytes 536870912 --arenas 16 --mode ipc --rounds 30
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/kernel_abi.h"

namespace {

struct Options {
  std::string kernel;
  std::string mode = "malloc";
  size_t bytes = size_t{512} << 20;
  int arenas = 8;
  int rounds = 30;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "kiln-arena-probe: %s\n", what.c_str());
  std::exit(1);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorString(r, &s);
    die(std::string(what) + ": " + (s ? s : "CUDA driver error"));
  }
}

// A whole non-negative number, or a clear error.
uint64_t number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || v[0] == '-' || *end != '\0' || errno == ERANGE) die(flag + " wants a whole number, not '" + v + "'");
  return n;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) die("flag " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--kernel") {
      o.kernel = v;
    } else if (a == "--mode") {
      o.mode = v;
    } else if (a == "--bytes") {
      o.bytes = number(a, v);
    } else if (a == "--arenas") {
      o.arenas = static_cast<int>(std::min<uint64_t>(number(a, v), 4096));
    } else if (a == "--rounds") {
      o.rounds = static_cast<int>(std::min<uint64_t>(number(a, v), 1000000));
    } else {
      die("unknown flag " + a);
    }
  }
  if (o.kernel.empty()) die("--kernel is required");
  if (o.arenas < 1 || o.rounds < 3 || o.bytes < 4096) die("--arenas >= 1, --rounds >= 3, --bytes >= 4096");
  static const char* const kModes[] = {"malloc", "malloc2m", "vmm", "ipc", "ipc2m", "vmmipc", "child"};
  if (std::find(std::begin(kModes), std::end(kModes), o.mode) == std::end(kModes)) die("unknown --mode " + o.mode);
  return o;
}

__global__ void fill(float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    x[i] = static_cast<float>((i * 2654435761u) & 1023) / 1024.f;
  }
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

// Times the kernel on every arena's input, round by round, and prints one line per arena.
void time_arenas(const Options& o, const std::vector<char*>& bases) {
  void* lib = dlopen(o.kernel.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) die(std::string("dlopen: ") + dlerror());
  auto entry = reinterpret_cast<int (*)(const kiln_args*)>(dlsym(lib, "kiln_entry"));
  if (!entry) die("the kernel exports no kiln_entry");
  const size_t n = (o.bytes - 4096) / sizeof(float);
  float* y = nullptr;
  check(cudaMalloc(&y, 256), "cudaMalloc y");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (char* b : bases) fill<<<1024, 256, 0, stream>>>(reinterpret_cast<float*>(b), n);
  check(cudaStreamSynchronize(stream), "fill");
  std::vector<std::vector<double>> us(bases.size());
  for (int r = -2; r < o.rounds; ++r) {
    for (size_t a = 0; a < bases.size(); ++a) {
      kiln_tensor in{}, out{};
      in.data = bases[a];
      in.dtype = KILN_F32;
      in.ndim = 1;
      in.shape[0] = static_cast<int64_t>(n);
      out.data = y;
      out.dtype = KILN_F32;
      out.ndim = 1;
      out.shape[0] = 1;
      kiln_args args{};
      args.inputs = &in;
      args.n_inputs = 1;
      args.outputs = &out;
      args.n_outputs = 1;
      args.stream = stream;
      check(cudaEventRecord(start, stream), "record");
      if (entry(&args) != 0) die("kiln_entry failed");
      check(cudaEventRecord(stop, stream), "record");
      check(cudaEventSynchronize(stop), "kernel");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
      if (r >= 0) us[a].push_back(1000.0 * ms);
    }
  }
  for (size_t a = 0; a < bases.size(); ++a) {
    const auto va = reinterpret_cast<uintptr_t>(bases[a]);
    std::printf(
        "{\"mode\":\"%s\",\"pid\":%d,\"arena\":%zu,\"va_mod_2m\":%lu,\"va_mod_512m\":%lu,"
        "\"median_us\":%.2f,\"p10_us\":%.2f,\"p90_us\":%.2f}\n",
        o.mode.c_str(), static_cast<int>(getpid()), a, static_cast<unsigned long>(va % (2u << 20)),
        static_cast<unsigned long>(va % (size_t{512} << 20)), quantile(us[a], 0.5), quantile(us[a], 0.1),
        quantile(us[a], 0.9));
  }
  std::fflush(stdout);
}

CUmemAllocationProp vmm_prop(bool shareable) {
  CUdevice dev;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  if (shareable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

size_t vmm_size(const CUmemAllocationProp& prop, size_t bytes, size_t* gran) {
  check(cuMemGetAllocationGranularity(gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity");
  return (bytes + *gran - 1) / *gran * *gran;
}

char* vmm_map(CUmemGenericAllocationHandle h, const CUmemAllocationProp& prop, size_t size, size_t gran) {
  CUdeviceptr p;
  check(cuMemAddressReserve(&p, size, gran, 0, 0), "cuMemAddressReserve");
  check(cuMemMap(p, size, 0, h, 0), "cuMemMap");
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(cuMemSetAccess(p, size, &access, 1), "cuMemSetAccess");
  return reinterpret_cast<char*>(p);
}

// --arenas allocations through the virtual-memory API, mapped in this process; `handles` gets each one's
// handle (to export it). Shareable: exportable as a POSIX file descriptor.
std::vector<char*> vmm_allocate(const Options& o, bool shareable, std::vector<CUmemGenericAllocationHandle>* handles) {
  check(cuInit(0), "cuInit");
  check(cudaFree(nullptr), "context");
  const CUmemAllocationProp prop = vmm_prop(shareable);
  size_t gran = 0;
  const size_t size = vmm_size(prop, o.bytes, &gran);
  std::vector<char*> bases;
  for (int a = 0; a < o.arenas; ++a) {
    CUmemGenericAllocationHandle h;
    check(cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
    bases.push_back(vmm_map(h, prop, size, gran));
    if (handles) handles->push_back(h);
  }
  return bases;
}

std::vector<char*> allocate(const Options& o) {
  if (o.mode == "vmm") return vmm_allocate(o, false, nullptr);
  std::vector<char*> bases;
  const size_t size = o.mode == "malloc2m" ? (o.bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20) : o.bytes;
  for (int a = 0; a < o.arenas; ++a) {
    void* p = nullptr;
    check(cudaMalloc(&p, size), "cudaMalloc");
    bases.push_back(static_cast<char*>(p));
  }
  return bases;
}

// File descriptors over a Unix socket (SCM_RIGHTS), one per message of one byte.
struct FdMessage {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

void send_fd(int sock, int fd) {
  FdMessage m;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(sock, &m.msg, 0) != 1) die("sendmsg");
}

int receive_fd(int sock) {
  FdMessage m;
  if (recvmsg(sock, &m.msg, 0) != 1) die("recvmsg");
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  if (!c || c->cmsg_type != SCM_RIGHTS) die("no descriptor in the message");
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

// The arenas allocated in one process and timed in another, forked before either made a CUDA call:
//   ipc     cudaMalloc of --bytes, cudaIpcGetMemHandle / cudaIpcOpenMemHandle (the legacy IPC handles)
//   ipc2m   the same, the size rounded up to 2 MiB
//   vmmipc  cuMemCreate with a POSIX file descriptor handle, the descriptor sent over a Unix socket,
//           imported and mapped by the child at the granularity the device recommends
//   child   the child allocates its own (cudaMalloc), the parent only waits: the control
int run_two_processes(const Options& o) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair");
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(sv[0]);
    const int sock = sv[1];
    std::vector<char*> bases;
    if (o.mode == "child") {
      bases = allocate(Options{o.kernel, "malloc", o.bytes, o.arenas, o.rounds});
    } else if (o.mode == "vmmipc") {
      check(cudaFree(nullptr), "context");
      const CUmemAllocationProp prop = vmm_prop(true);
      size_t gran = 0;
      const size_t size = vmm_size(prop, o.bytes, &gran);
      for (int a = 0; a < o.arenas; ++a) {
        const int fd = receive_fd(sock);
        CUmemGenericAllocationHandle h;
        check(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              "cuMemImportFromShareableHandle");
        close(fd);
        bases.push_back(vmm_map(h, prop, size, gran));
      }
    } else {
      for (int a = 0; a < o.arenas; ++a) {
        cudaIpcMemHandle_t h;
        size_t got = 0;
        while (got < sizeof(h)) {
          const ssize_t k = read(sock, reinterpret_cast<char*>(&h) + got, sizeof(h) - got);
          if (k <= 0) die("the parent sent no handle");
          got += static_cast<size_t>(k);
        }
        void* p = nullptr;
        check(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
        bases.push_back(static_cast<char*>(p));
      }
    }
    time_arenas(o, bases);
    const char done = 1;
    if (write(sock, &done, 1) != 1) die("write");
    _exit(0);
  }
  close(sv[1]);
  const int sock = sv[0];
  if (o.mode == "vmmipc") {
    std::vector<CUmemGenericAllocationHandle> handles;
    vmm_allocate(o, true, &handles);  // mapped in the parent too, as the evaluator's arenas are
    for (CUmemGenericAllocationHandle h : handles) {
      int fd = -1;
      check(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "export");
      send_fd(sock, fd);
      close(fd);
    }
  } else if (o.mode != "child") {
    const std::string how = o.mode == "ipc2m" ? "malloc2m" : "malloc";
    for (char* b : allocate(Options{o.kernel, how, o.bytes, o.arenas, o.rounds})) {
      cudaIpcMemHandle_t h;
      check(cudaIpcGetMemHandle(&h, b), "cudaIpcGetMemHandle");
      if (write(sock, &h, sizeof(h)) != static_cast<ssize_t>(sizeof(h))) die("write handle");
    }
  }
  char done = 0;
  const ssize_t k = read(sock, &done, 1);
  int status = 0;
  waitpid(pid, &status, 0);
  return k == 1 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.mode == "ipc" || o.mode == "ipc2m" || o.mode == "vmmipc" || o.mode == "child") return run_two_processes(o);
  time_arenas(o, allocate(o));
  return 0;
}
