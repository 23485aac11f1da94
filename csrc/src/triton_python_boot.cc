// Starting pyserver's Python side from a program that has none: the first
// TRITONSERVER_ServerNew of a C or C++ program linked against
// libtritonserver.so comes here (server_control.h).
//
// The library knows no Python headers: libpython's stable C entry points are
// looked up at run time, in the process (a Python program that loaded this
// library, or a program linked with libpython) or else in the libpython this
// library was built with (PYSERVER_LIBPYTHON overrides it). The interpreter
// started here is never finalized: the server's threads are Python threads
// and live until the process exits.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "pyserver/triton/server_control.h"
#include "triton_api_internal.h"

#ifndef PYSERVER_DEFAULT_LIBPYTHON
#define PYSERVER_DEFAULT_LIBPYTHON ""
#endif
#ifndef PYSERVER_DEFAULT_PYTHON
#define PYSERVER_DEFAULT_PYTHON ""
#endif

using pyserver::triton::Err;

namespace {

struct PythonApi {
  int (*IsInitialized)() = nullptr;
  void (*InitializeEx)(int) = nullptr;
  int (*GILStateEnsure)() = nullptr;  // PyGILState_STATE is an int-sized enum
  void (*GILStateRelease)(int) = nullptr;
  void* (*EvalSaveThread)() = nullptr;
  int (*RunSimpleString)(const char*) = nullptr;
  wchar_t* (*DecodeLocale)(const char*, size_t*) = nullptr;
  void (*SetProgramName)(const wchar_t*) = nullptr;  // optional (deprecated in 3.11)
};

template <typename Fn>
bool Find(void* handle, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  return *fn != nullptr;
}

bool Resolve(void* handle, PythonApi* api) {
  bool ok = Find(handle, "Py_IsInitialized", &api->IsInitialized) &&
            Find(handle, "Py_InitializeEx", &api->InitializeEx) &&
            Find(handle, "PyGILState_Ensure", &api->GILStateEnsure) &&
            Find(handle, "PyGILState_Release", &api->GILStateRelease) &&
            Find(handle, "PyEval_SaveThread", &api->EvalSaveThread) &&
            Find(handle, "PyRun_SimpleString", &api->RunSimpleString) &&
            Find(handle, "Py_DecodeLocale", &api->DecodeLocale);
  Find(handle, "Py_SetProgramName", &api->SetProgramName);
  return ok;
}

// A Python string literal of `text` (paths may hold quotes or backslashes).
std::string Literal(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

// The folder that holds the pyserver package: this library is
// <folder>/pyserver/engine/libtritonserver.so, wherever a link to it (or to
// its folder, as perf_analyzer's <dir>/lib) was loaded from.
std::string PackageRoot() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&PackageRoot), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  char* resolved = realpath(info.dli_fname, nullptr);
  if (resolved == nullptr) return "";
  std::string path = resolved;
  std::free(resolved);
  for (int i = 0; i < 3; ++i) {
    size_t slash = path.rfind('/');
    if (slash == std::string::npos) return "";
    path.resize(slash);
  }
  return path;
}

TRITONSERVER_Error* Boot() {
  PythonApi api;
  if (!Resolve(RTLD_DEFAULT, &api)) {
    const char* env = std::getenv("PYSERVER_LIBPYTHON");
    std::string path = env != nullptr && *env ? env : PYSERVER_DEFAULT_LIBPYTHON;
    if (path.empty()) {
      return Err(TRITONSERVER_ERROR_UNAVAILABLE,
                 "no Python runtime in this process, and none known to start: set "
                 "PYSERVER_LIBPYTHON to a libpython3 shared library");
    }
    // Global: the engine's extension modules resolve Python's symbols in it.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      return Err(TRITONSERVER_ERROR_UNAVAILABLE,
                 "could not load the Python runtime " + path + ": " + (why ? why : "?"));
    }
    if (!Resolve(handle, &api)) {
      return Err(TRITONSERVER_ERROR_UNAVAILABLE, path + " is not a Python 3 runtime");
    }
  }
  const bool started_here = !api.IsInitialized();
  if (started_here) {
    // Named after the interpreter pyserver was built with, Python finds that
    // installation's packages (a virtual environment's too) and worker
    // processes start that interpreter rather than this program.
    const char* env = std::getenv("PYSERVER_PYTHON");
    std::string python = env != nullptr && *env ? env : PYSERVER_DEFAULT_PYTHON;
    if (!python.empty() && api.SetProgramName != nullptr) {
      // Python keeps the pointer: it lives as long as the process.
      wchar_t* name = api.DecodeLocale(python.c_str(), nullptr);
      if (name != nullptr) api.SetProgramName(name);
    }
    api.InitializeEx(0);  // the program keeps its own signal handlers
  }
  const int gil = started_here ? 0 : api.GILStateEnsure();
  const std::string root = PackageRoot();
  std::string code = "import sys\n";
  if (!root.empty()) {
    code += "if " + Literal(root) + " not in sys.path: sys.path.insert(0, " + Literal(root) +
            ")\n";
  }
  code += "import pyserver.inprocess.c_api\n";
  const int rc = api.RunSimpleString(code.c_str());
  if (started_here) {
    api.EvalSaveThread();  // the server's threads take the GIL from here on
  } else {
    api.GILStateRelease(gil);
  }
  if (rc != 0) {
    return Err(TRITONSERVER_ERROR_UNAVAILABLE,
               "could not start pyserver in this process: importing pyserver.inprocess.c_api "
               "failed (its traceback is on stderr)");
  }
  return nullptr;
}

}  // namespace

namespace pyserver::triton {

TRITONSERVER_Error* BootPython() {
  static std::mutex mu;
  static bool booted = false;
  std::lock_guard<std::mutex> lock(mu);
  if (booted) return nullptr;
  TRITONSERVER_Error* err = Boot();
  booted = err == nullptr;
  return err;
}

}  // namespace pyserver::triton
