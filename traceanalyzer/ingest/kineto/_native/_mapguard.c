/* Guard memory maps of trace files against the file being cut shorter while they are mapped.
 *
 * The Kineto scanner (traceanalyzer/ingest/kineto/jsonscan.py) cuts a plain file into runs of
 * events where it lies, in memory-mapped windows; mapguard.py is its Python side.
 *
 * guard(mapping) -> slot: a fault past the end of the mapping gets zero pages instead of
 *   SIGBUS (-1: every slot taken, unguarded); slot for unguard.
 * unguard(slot): before the mapping is closed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* Memory-mapped input that another process cuts shorter while it is mapped: touching a page
 * past the new end raises SIGBUS, which would end the process where a read() would have seen a
 * short file. A guarded range instead gets zero pages from the fault on, which no decoder reads
 * as JSON; the reader then reads the file again, as any stream, and sees where it ends now.
 * Faults outside the guarded ranges go to whatever handled SIGBUS before. */
#define GUARDS 256
static struct {
    uintptr_t lo, hi; /* hi == 0: a free slot */
} guards[GUARDS];
static struct sigaction previous_bus;
static int bus_installed;
static uintptr_t page_size;

static void on_bus(int sig, siginfo_t *info, void *context) {
    uintptr_t at = (uintptr_t)info->si_addr;
    /* Only a read past a mapped file's end (BUS_ADRERR) is ours: for a SIGBUS sent by kill(),
     * si_addr holds no address, and must not zero a window that is still good. */
    for (int i = 0; i < GUARDS && info->si_code == BUS_ADRERR; i++) {
        uintptr_t hi = __atomic_load_n(&guards[i].hi, __ATOMIC_ACQUIRE);
        uintptr_t lo = __atomic_load_n(&guards[i].lo, __ATOMIC_ACQUIRE);
        if (hi && lo <= at && at < hi) {
            uintptr_t from = at & ~(page_size - 1);
            if (mmap((void *)from, hi - from, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                     -1, 0) != MAP_FAILED)
                return; /* the faulting read runs again, on zeros */
        }
    }
    if (previous_bus.sa_flags & SA_SIGINFO) {
        previous_bus.sa_sigaction(sig, info, context);
    } else if (previous_bus.sa_handler == SIG_IGN && info->si_code <= 0) {
        return; /* a SIGBUS sent to a process that ignores it, as before */
    } else if (previous_bus.sa_handler != SIG_DFL && previous_bus.sa_handler != SIG_IGN) {
        previous_bus.sa_handler(sig);
    } else { /* the default action, as before: for a fault and for a sent signal alike (a
              * fault alone would repeat on return, a sent signal would not) */
        signal(SIGBUS, SIG_DFL);
        raise(SIGBUS);
    }
}

static PyObject *guard(PyObject *self, PyObject *mapped) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(mapped, &view, PyBUF_SIMPLE)) return NULL;
    uintptr_t lo = (uintptr_t)view.buf, hi = lo + (uintptr_t)view.len;
    PyBuffer_Release(&view); /* the caller keeps the mapping alive until it unguards it */
    if (!bus_installed) {
        page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
        struct sigaction on = {0};
        on.sa_sigaction = on_bus;
        on.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&on.sa_mask);
        if (sigaction(SIGBUS, &on, &previous_bus)) return PyLong_FromLong(-1);
        bus_installed = 1;
    }
    hi = (hi + page_size - 1) & ~(page_size - 1); /* the map's last page is all of it */
    for (int i = 0; i < GUARDS; i++) {
        if (!guards[i].hi) { /* slots are taken and freed with the GIL held */
            __atomic_store_n(&guards[i].lo, lo, __ATOMIC_RELEASE);
            __atomic_store_n(&guards[i].hi, hi, __ATOMIC_RELEASE);
            return PyLong_FromLong(i);
        }
    }
    return PyLong_FromLong(-1); /* unguarded, as without this */
}

static PyObject *unguard(PyObject *self, PyObject *slot) {
    (void)self;
    long i = PyLong_AsLong(slot);
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (i >= 0 && i < GUARDS) __atomic_store_n(&guards[i].hi, 0, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

static PyMethodDef METHODS[] = {
    {"guard", guard, METH_O,
     "guard(mapping) -> slot: zero pages, not SIGBUS, past where the file is cut (-1: unguarded)."},
    {"unguard", unguard, METH_O, "unguard(slot): before the mapping is closed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_mapguard", "Memory maps safe from a file cut shorter (see _mapguard.c).",
    -1, METHODS, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__mapguard(void) { return PyModule_Create(&MODULE); }
