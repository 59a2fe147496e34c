/* tensorwire._speedups: the shorter per-message paths of Encoder.encode and Decoder.decode, compiled.
 *
 * Each function does what the Python code of its caller does on that path (tensorwire._encoder,
 * tensorwire._decoder), with no interpreter between the steps, and gives None wherever that code
 * goes on to its full path, which names what is wrong. The package works without this module
 * (tensorwire._native): the Python code takes these paths itself.
 *
 *   one_encode(state, message) -> [frame 0] | None
 *       state: (plans, levels, max_header, encode): plans maps a class to (check, levels, bare) for
 *       the types whose message is one encode and one check (TypePlan.plain); a message of such a
 *       type, of at most ``levels`` levels, is encode(message), checked by check(body), frame 0
 *       bare + body if it is at most max_header bytes.
 *   plain_decode(state, frames) -> message | None
 *       state: (plain, max_header, budget, become, last): plain maps frame 0 up to the body (its tag,
 *       fingerprint, empty data and empty buffer table) to (read, bounded, cls, guard) as
 *       Decoder._plain holds them; one frame (bytes, or any contiguous buffer: its bytes are read
 *       through a view) of such a type, at most max_header bytes, has its body's level openers
 *       counted (unless bounded), guard(body) run where they are over budget, the body read, and
 *       the instance made one of cls (become(message, cls)) where cls is not None; last, a list of
 *       three items, remembers the entry last found (see entry_of).
 *   count_openers(data) -> int
 *       the bytes of data that can open a msgpack level (tensorwire._scan.OPENERS).
 *
 * A peer's bytes are only read within their length; the frame is held (or its view) until the
 * decode returns, and the body given to the Python code called is a copy of its bytes.
 * An Exception from the Python code called gives None (the full path runs it again and names it);
 * any other (KeyboardInterrupt) propagates.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

/* The frame 0 of a message with no data and no buffers is longer than this (tensorwire._plain.body_at). */
#define SHORTEST_HEAD 72

static Py_ssize_t
openers_in(const unsigned char *p, Py_ssize_t n)
{
    /* fixmap and fixarray (0x80-0x9f), ext 8/16/32 (0xc7-0xc9), fixext (0xd4-0xd8), array and map
     * 16/32 (0xdc-0xdf): the same 44 bytes as tensorwire._scan.OPENERS, branch-free so that the
     * compiler can count many bytes at a time */
    Py_ssize_t count = 0;
    while (n > 0) {  /* in runs of 255 bytes, so that a run's count fits in a byte (bytes at a time) */
        Py_ssize_t run = n < 255 ? n : 255;
        unsigned char in_run = 0;
        for (Py_ssize_t i = 0; i < run; i++) {
            unsigned char c = p[i];
            in_run += (unsigned char)(((unsigned char)(c - 0x80) < 0x20) | ((unsigned char)(c - 0xc7) < 3) |
                                      ((unsigned char)(c - 0xd4) < 5) | ((unsigned char)(c - 0xdc) < 4));
        }
        count += in_run;
        p += run;
        n -= run;
    }
    return count;
}

/* The first four items of a state tuple of ``size`` items: a dict, two ints and a callable (``shape``
 * names them in the error for any other tuple). */
static int
unpack_state(PyObject *state, Py_ssize_t size, const char *shape, PyObject **table, Py_ssize_t *first,
             Py_ssize_t *second, PyObject **fourth)
{
    if (!PyTuple_CheckExact(state) || PyTuple_GET_SIZE(state) != size || !PyDict_CheckExact(PyTuple_GET_ITEM(state, 0))) {
        PyErr_Format(PyExc_TypeError, "a tensorwire._speedups state is a tuple %s", shape);
        return -1;
    }
    *table = PyTuple_GET_ITEM(state, 0);
    *first = PyLong_AsSsize_t(PyTuple_GET_ITEM(state, 1));
    if (*first == -1 && PyErr_Occurred()) {
        return -1;
    }
    *second = PyLong_AsSsize_t(PyTuple_GET_ITEM(state, 2));
    if (*second == -1 && PyErr_Occurred()) {
        return -1;
    }
    *fourth = PyTuple_GET_ITEM(state, 3);
    return 0;
}

/* After a call into Python code failed: None (and no error) for an Exception, NULL for anything else. */
static PyObject *
not_here(void)
{
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return NULL;
}

static PyObject *
one_encode(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *plans, *encode, *entry, *body, *checked, *head, *frames;
    Py_ssize_t levels, max_header, type_levels, bare_size, body_size;

    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "one_encode takes a state and a message");
        return NULL;
    }
    if (unpack_state(args[0], 4, "(plans, levels, max_header, encode)", &plans, &levels, &max_header, &encode) < 0) {
        return NULL;
    }
    entry = PyDict_GetItemWithError(plans, (PyObject *)Py_TYPE(args[1]));
    if (entry == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;  /* a type not planned yet, or not one encode: the Python path */
    }
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 3 || !PyBytes_CheckExact(PyTuple_GET_ITEM(entry, 2))) {
        PyErr_SetString(PyExc_TypeError, "a one_encode plan is a tuple (check, levels, bare)");
        return NULL;
    }
    Py_INCREF(entry);  /* held while Python code runs: the dict may change meanwhile */
    type_levels = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1));
    if (type_levels == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            Py_DECREF(entry);
            return NULL;
        }
        PyErr_Clear();  /* UNBOUNDED (2**63) does not fit: a recursive type is never taken here */
        type_levels = PY_SSIZE_T_MAX;
    }
    if (type_levels > levels) {
        Py_DECREF(entry);
        Py_RETURN_NONE;
    }
    body = PyObject_CallOneArg(encode, args[1]);
    if (body == NULL) {
        Py_DECREF(entry);
        return not_here();
    }
    if (!PyBytes_CheckExact(body)) {
        Py_DECREF(body);
        Py_DECREF(entry);
        PyErr_SetString(PyExc_TypeError, "one_encode's encode must give bytes");
        return NULL;
    }
    checked = PyObject_CallOneArg(PyTuple_GET_ITEM(entry, 0), body);
    if (checked == NULL) {
        Py_DECREF(body);
        Py_DECREF(entry);
        return not_here();
    }
    Py_DECREF(checked);
    bare_size = PyBytes_GET_SIZE(PyTuple_GET_ITEM(entry, 2));
    body_size = PyBytes_GET_SIZE(body);
    if (body_size > max_header - bare_size) {  /* over the limit: the Python path says so */
        Py_DECREF(body);
        Py_DECREF(entry);
        Py_RETURN_NONE;
    }
    head = PyBytes_FromStringAndSize(NULL, bare_size + body_size);
    if (head != NULL) {
        memcpy(PyBytes_AS_STRING(head), PyBytes_AS_STRING(PyTuple_GET_ITEM(entry, 2)), (size_t)bare_size);
        memcpy(PyBytes_AS_STRING(head) + bare_size, PyBytes_AS_STRING(body), (size_t)body_size);
    }
    Py_DECREF(body);
    Py_DECREF(entry);
    if (head == NULL) {
        return NULL;
    }
    frames = PyList_New(1);
    if (frames == NULL) {
        Py_DECREF(head);
        return NULL;
    }
    PyList_SET_ITEM(frames, 0, head);
    return frames;
}

/* What ``obj.__class__ = cls`` does where the type of ``obj`` is a subclass of ``cls`` that adds
 * nothing to its layout (a closed twin, tensorwire._twin): CPython's checks that the two layouts
 * agree, for that one case (a direct subclass, both mutable heap types of one size, one deallocator,
 * no managed dict), its audit event, and the swap. 0 if swapped; 1 if not that case (the caller
 * calls ``become``, which checks everything and swaps or raises); -1 with an error (an audit hook's). */
static int
swap_to_base(PyObject *obj, PyTypeObject *cls)
{
    PyTypeObject *type = Py_TYPE(obj);
    const unsigned long layout = Py_TPFLAGS_HEAPTYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
                                 Py_TPFLAGS_MANAGED_DICT;
    if (type->tp_base != cls || (type->tp_flags & layout) != (cls->tp_flags & layout) ||
        (cls->tp_flags & layout & ~Py_TPFLAGS_HAVE_GC) != Py_TPFLAGS_HEAPTYPE || type->tp_basicsize != cls->tp_basicsize ||
        type->tp_itemsize != cls->tp_itemsize || type->tp_dictoffset != cls->tp_dictoffset ||
        type->tp_weaklistoffset != cls->tp_weaklistoffset || type->tp_dealloc != cls->tp_dealloc ||
        type->tp_free != cls->tp_free) {
        return 1;
    }
    if (PySys_Audit("object.__setattr__", "OsO", obj, "__class__", (PyObject *)cls) < 0) {
        return -1;
    }
    Py_INCREF(cls);
    Py_SET_TYPE(obj, cls);
    Py_DECREF(type);
    return 0;
}

/* The entry of ``plain`` for the ``at`` bytes at ``p`` (a new reference), or NULL (with an error, or
 * none: not there). ``last`` remembers the last one found, a list [table, key, entry] (anything
 * else: nothing is remembered): frames of one type in a row compare their bytes with its key
 * instead of making and hashing one. It is only trusted for the very table it names (held there),
 * which the decoder never changes once made. */
static PyObject *
entry_of(PyObject *plain, PyObject *last, const unsigned char *p, Py_ssize_t at)
{
    PyObject *key, *entry, *old[3];

    if (PyList_CheckExact(last) && PyList_GET_SIZE(last) == 3 && PyList_GET_ITEM(last, 0) == plain) {
        key = PyList_GET_ITEM(last, 1);
        if (PyBytes_CheckExact(key) && PyBytes_GET_SIZE(key) == at && memcmp(PyBytes_AS_STRING(key), p, (size_t)at) == 0) {
            entry = PyList_GET_ITEM(last, 2);
            Py_INCREF(entry);
            return entry;
        }
    }
    key = PyBytes_FromStringAndSize((const char *)p, at);
    if (key == NULL) {
        return NULL;
    }
    entry = PyDict_GetItemWithError(plain, key);
    if (entry == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    Py_INCREF(entry);
    /* ``last`` looked at after the lookup: a key's __eq__ could have changed it (a decoder's table
     * holds only bytes keys, whose comparison runs no Python code; nothing here relies on that).
     * The old items are let go only once the new ones are in place. */
    if (PyList_CheckExact(last) && PyList_GET_SIZE(last) == 3) {
        for (Py_ssize_t i = 0; i < 3; i++) {
            old[i] = PyList_GET_ITEM(last, i);
        }
        Py_INCREF(plain);
        Py_INCREF(entry);
        PyList_SET_ITEM(last, 0, plain);
        PyList_SET_ITEM(last, 1, key);  /* (its reference moves there) */
        PyList_SET_ITEM(last, 2, entry);
        for (Py_ssize_t i = 0; i < 3; i++) {
            Py_XDECREF(old[i]);
        }
    }
    else {
        Py_DECREF(key);
    }
    return entry;
}

/* The message of frame 0 ``p`` (``size`` bytes) read on the shorter path, or None (see plain_decode). */
static PyObject *
plain_frame(PyObject *plain, PyObject *last, Py_ssize_t max_header, Py_ssize_t budget, PyObject *become,
            const unsigned char *p, Py_ssize_t size)
{
    PyObject *entry, *body, *message = NULL, *done;
    Py_ssize_t at;

    if (size <= SHORTEST_HEAD || size > max_header) {
        Py_RETURN_NONE;
    }
    /* where the body starts if the tag (a str) and the fingerprint (64 characters) are as encoders
     * write them and the data and buffer table are empty (tensorwire._plain.body_at) */
    if (p[1] >= 0xa0 && p[1] <= 0xbf) {
        at = (Py_ssize_t)p[1] - 0x5c + 3;
    }
    else if (p[1] == 0xd9) {
        at = (Py_ssize_t)p[2] + 69 + 3;
    }
    else {
        Py_RETURN_NONE;
    }
    if (at >= size || p[at - 3] != 0xc4 || p[at - 2] != 0 || p[at - 1] != 0x90) {
        Py_RETURN_NONE;  /* cut short, or data or buffers (as every table key ends): not looked up */
    }
    entry = entry_of(plain, last, p, at);
    if (entry == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 4) {
        Py_DECREF(entry);
        PyErr_SetString(PyExc_TypeError, "a plain_decode entry is a tuple (read, bounded, cls, guard)");
        return NULL;
    }
    body = PyBytes_FromStringAndSize((const char *)p + at, size - at);  /* the body the code called reads */
    if (body == NULL) {
        Py_DECREF(entry);
        return NULL;
    }
    if (PyTuple_GET_ITEM(entry, 1) != Py_True &&
        openers_in((const unsigned char *)PyBytes_AS_STRING(body), size - at) > budget) {
        done = PyObject_CallOneArg(PyTuple_GET_ITEM(entry, 3), body);  /* too many: its guard first */
        if (done == NULL) {
            goto failed;
        }
        Py_DECREF(done);
    }
    message = PyObject_CallOneArg(PyTuple_GET_ITEM(entry, 0), body);
    if (message == NULL) {
        goto failed;
    }
    if (PyTuple_GET_ITEM(entry, 2) != Py_None) {  /* read as its closed twin: made the class's own */
        PyObject *pair[2] = {message, PyTuple_GET_ITEM(entry, 2)};
        int swapped = PyType_Check(pair[1]) ? swap_to_base(message, (PyTypeObject *)pair[1]) : 1;
        done = swapped == 1 ? PyObject_Vectorcall(become, pair, 2, NULL) : swapped == 0 ? Py_NewRef(Py_None) : NULL;
        if (done == NULL) {
            Py_CLEAR(message);
            goto failed;
        }
        Py_DECREF(done);
    }
    Py_DECREF(body);
    Py_DECREF(entry);
    return message;
failed:
    Py_DECREF(body);
    Py_DECREF(entry);
    return not_here();
}

static PyObject *
plain_decode(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *plain, *become, *last, *frames, *head, *message;
    Py_ssize_t max_header, budget;
    Py_buffer view;

    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "plain_decode takes a state and frames");
        return NULL;
    }
    if (unpack_state(args[0], 5, "(plain, max_header, budget, become, last)", &plain, &max_header, &budget, &become) < 0) {
        return NULL;
    }
    last = PyTuple_GET_ITEM(args[0], 4);
    frames = args[1];
    if (PyList_CheckExact(frames) && PyList_GET_SIZE(frames) == 1) {
        head = PyList_GET_ITEM(frames, 0);
    }
    else if (PyTuple_CheckExact(frames) && PyTuple_GET_SIZE(frames) == 1) {
        head = PyTuple_GET_ITEM(frames, 0);
    }
    else {
        Py_RETURN_NONE;
    }
    if (PyBytes_CheckExact(head)) {
        Py_INCREF(head);  /* its bytes are read below: held, whatever the code called does to the frames */
        message = plain_frame(plain, last, max_header, budget, become,
                              (const unsigned char *)PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head));
        Py_DECREF(head);
        return message;
    }
    if (!PyObject_CheckBuffer(head)) {
        Py_RETURN_NONE;
    }
    Py_INCREF(head);  /* a view (tw.split's), a bytearray: read through a view of it, held meanwhile */
    if (PyObject_GetBuffer(head, &view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(head);
        return not_here();  /* not contiguous, released: the Python code names it */
    }
    message = plain_frame(plain, last, max_header, budget, become, (const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    Py_DECREF(head);
    return message;
}

static PyObject *
count_openers(PyObject *Py_UNUSED(module), PyObject *data)
{
    Py_buffer view;
    Py_ssize_t count;

    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    count = openers_in((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(count);
}

static PyMethodDef speedups_methods[] = {
    {"one_encode", (PyCFunction)(void (*)(void))one_encode, METH_FASTCALL,
     "one_encode(state, message): frame 0 of a message that is one encode and one check, or None."},
    {"plain_decode", (PyCFunction)(void (*)(void))plain_decode, METH_FASTCALL,
     "plain_decode(state, frames): the message of a body read alone, or None."},
    {"count_openers", count_openers, METH_O,
     "count_openers(data): how many bytes of data can open a msgpack level."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot speedups_slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "tensorwire._speedups",
    "The shorter per-message paths of Encoder.encode and Decoder.decode, compiled.",
    0,
    speedups_methods,
    speedups_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}
