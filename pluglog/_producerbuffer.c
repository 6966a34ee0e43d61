/* pluglog._producerbuffer: the Twisted producer's per-record path in C.
 *
 * RecordBuffer is the base of pluglog.client.batches.Batch: add() encodes a
 * key-less, header-less record (the bytes _clientcodec.encode_record makes)
 * into the open batch and makes its Deferred. FastSend is a Producer's
 * ``send`` attribute: send(topic, value)'s common case without a Python
 * frame. fire_acks() fires a batch's Deferreds; track() puts an object back
 * under the cyclic garbage collector. Why C: these run once per record, and
 * the 1M-record benchmark was bound by them (bench/RESULTS.md, session 6);
 * tests/unit/test_client_batches.py holds them to the Python versions in
 * pluglog/client/batches.py.
 *
 * Longer than the ~500 lines a module gets, on purpose: one compilation
 * unit, so the two types and fire_acks share static helpers the compiler
 * inlines into the per-record path (splitting it would need exported
 * symbols or a shared header of static functions for no reader's gain).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#include "_zigzag.h"

/* RecordBuffer: the C base of pluglog.client.batches.Batch (one partition's
 * open batch). add() is send()'s common case in one call: a key-less,
 * header-less record encoded and appended, its Deferred made, the
 * producer's counters updated. fire_acks() fires a batch's Deferreds.
 *
 * Why the Deferreds are made here, outside the cyclic garbage collector: a
 * full buffer.memory holds ~150k of them, and every full collection walked
 * them all (a third of the producer's CPU, bench/RESULTS.md). A record's
 * Deferred is made by object.__new__ (RecordDeferred has no callback list
 * until one is asked for) and untracked; pluglog.client.batches puts it
 * back under the collector (track()) as soon as a callback list is made,
 * and fire_acks() does before giving it a result, so a Deferred that can be
 * part of a cycle is tracked again. One nobody else holds any more (the
 * batch's list has the only reference, no weak references) cannot be
 * observed unless it has callbacks: fire_acks() leaves it alone and it is
 * freed with the list. */

static PyObject *deferred_type;   /* RecordDeferred, from set_deferred_type() */
static PyObject *empty_tuple;
static PyObject *str_buffered_bytes, *str_buffer_memory, *str_unacked, *str_debug;
static PyObject *str_chain, *str_paused, *str_called, *str_result, *str_callback;

typedef struct {
    PyObject_HEAD
    PyObject *records;   /* list of encoded records (bytes) */
    PyObject *deferreds; /* list of their Deferreds */
    PyObject *base_ts;   /* int */
    PyObject *max_ts;    /* int */
    long long size;      /* bytes, batch header included */
    long long limit;     /* add() refuses a record past it */
} RecordBuffer;

static int
rb_traverse(RecordBuffer *self, visitproc visit, void *arg)
{
    Py_VISIT(self->records);
    Py_VISIT(self->deferreds);
    Py_VISIT(self->base_ts);
    Py_VISIT(self->max_ts);
    return 0;
}

static int
rb_clear(RecordBuffer *self)
{
    Py_CLEAR(self->records);
    Py_CLEAR(self->deferreds);
    Py_CLEAR(self->base_ts);
    Py_CLEAR(self->max_ts);
    return 0;
}

static void
rb_dealloc(RecordBuffer *self)
{
    PyObject_GC_UnTrack(self);
    rb_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
get_ll(PyObject *obj, PyObject *name, long long *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int
set_ll(PyObject *obj, PyObject *name, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return rc;
}

/* A new record Deferred, untracked unless Deferred debugging is on. */
static PyObject *
new_deferred(void)
{
    if (deferred_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_deferred_type() was not called");
        return NULL;
    }
    PyObject *debug = PyObject_GetAttr(deferred_type, str_debug);
    if (debug == NULL)
        return NULL;
    int on = PyObject_IsTrue(debug);
    Py_DECREF(debug);
    if (on < 0)
        return NULL;
    if (on) /* through __init__, which records the creator */
        return PyObject_CallNoArgs(deferred_type);
    PyTypeObject *cls = (PyTypeObject *)deferred_type;
    PyObject *d = PyBaseObject_Type.tp_new(cls, empty_tuple, NULL);
    if (d != NULL && PyObject_GC_IsTracked(d))
        PyObject_GC_UnTrack(d);
    return d;
}

/* add(value, timestamp_ms, producer) -> Deferred, or None if the record does
 * not fit (this batch's limit, or the producer's buffer.memory). */
static PyObject *
rb_add_impl(RecordBuffer *self, PyObject *value, long long ts, PyObject *producer)
{
    if (!PyBytes_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "add() takes bytes values");
        return NULL;
    }
    if (self->records == NULL || !PyList_CheckExact(self->records) ||
        self->deferreds == NULL || !PyList_CheckExact(self->deferreds) ||
        self->base_ts == NULL || self->max_ts == NULL) {
        PyErr_SetString(PyExc_TypeError, "add() needs records and deferreds lists, "
                                         "base_ts and max_ts");
        return NULL;
    }
    long long base_ts = PyLong_AsLongLong(self->base_ts);
    long long max_ts = PyLong_AsLongLong(self->max_ts);
    if (PyErr_Occurred())
        return NULL;
    long long ts_delta;
    if (__builtin_sub_overflow(ts, base_ts, &ts_delta)) {
        PyErr_SetString(PyExc_OverflowError, "timestamp delta past int64");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(self->records);
    if (count >= INT32_MAX)
        Py_RETURN_NONE;
    Py_ssize_t vlen = PyBytes_GET_SIZE(value);
    Py_ssize_t body = 1 + zigzag_size(ts_delta) + zigzag_size(count) + 1 +
                      zigzag_size(vlen) + vlen + 1;
    Py_ssize_t total = zigzag_size(body) + body;
    if (self->size + total > self->limit)
        Py_RETURN_NONE;
    long long buffered, memory, unacked;
    if (get_ll(producer, str_buffered_bytes, &buffered) < 0 ||
        get_ll(producer, str_buffer_memory, &memory) < 0 ||
        get_ll(producer, str_unacked, &unacked) < 0)
        return NULL;
    if (buffered + total > memory)
        Py_RETURN_NONE;
    PyObject *encoded = PyBytes_FromStringAndSize(NULL, total);
    if (encoded == NULL)
        return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(encoded);
    out = put_zigzag(out, body);
    *out++ = 0; /* attributes */
    out = put_zigzag(out, ts_delta);
    out = put_zigzag(out, count);
    *out++ = 1; /* key: null (varint -1) */
    out = put_zigzag(out, vlen);
    memcpy(out, PyBytes_AS_STRING(value), vlen);
    out[vlen] = 0; /* no headers */
    PyObject *d = new_deferred();
    if (d == NULL) {
        Py_DECREF(encoded);
        return NULL;
    }
    if (ts > max_ts) {
        PyObject *t = PyLong_FromLongLong(ts);
        if (t == NULL)
            goto fail;
        Py_SETREF(self->max_ts, t);
    }
    if (PyList_Append(self->records, encoded) < 0)
        goto fail;
    if (PyList_Append(self->deferreds, d) < 0) {
        /* keep the two lists in step */
        PyList_SetSlice(self->records, count, count + 1, NULL);
        goto fail;
    }
    Py_DECREF(encoded);
    self->size += total;
    if (set_ll(producer, str_buffered_bytes, buffered + total) < 0 ||
        set_ll(producer, str_unacked, unacked + 1) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
fail:
    Py_DECREF(encoded);
    Py_DECREF(d);
    return NULL;
}

static PyObject *
rb_add(RecordBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "add(value, timestamp_ms, producer)");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(args[1]);
    if (ts == -1 && PyErr_Occurred())
        return NULL;
    return rb_add_impl(self, args[0], ts, args[2]);
}

static PyMemberDef rb_members[] = {
    {"records", T_OBJECT_EX, offsetof(RecordBuffer, records), 0, "encoded records"},
    {"deferreds", T_OBJECT_EX, offsetof(RecordBuffer, deferreds), 0, "their Deferreds"},
    {"base_ts", T_OBJECT_EX, offsetof(RecordBuffer, base_ts), 0, "first timestamp"},
    {"max_ts", T_OBJECT_EX, offsetof(RecordBuffer, max_ts), 0, "largest timestamp"},
    {"size", T_LONGLONG, offsetof(RecordBuffer, size), 0, "bytes, header included"},
    {"limit", T_LONGLONG, offsetof(RecordBuffer, limit), 0, "add() refuses past it"},
    {NULL},
};

static PyMethodDef rb_methods[] = {
    {"add", (PyCFunction)(void (*)(void))rb_add, METH_FASTCALL,
     "add(value, timestamp_ms, producer) -> Deferred or None"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RecordBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pluglog._producerbuffer.RecordBuffer",
    .tp_basicsize = sizeof(RecordBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One partition's open batch: the C base of client.batches.Batch.",
    .tp_traverse = (traverseproc)rb_traverse,
    .tp_clear = (inquiry)rb_clear,
    .tp_dealloc = (destructor)rb_dealloc,
    .tp_methods = rb_methods,
    .tp_members = rb_members,
    .tp_new = PyType_GenericNew,
};


/* FastSend(producer, send): the producer's ``send`` attribute. The common
 * case -- send(topic, value) with bytes and nothing else, the topic's lane
 * (its one partition's open batch) in producer._lanes, metadata fresh, the
 * record fitting -- is Python's short path in C, without a Python frame
 * (about half of send()'s CPU was that frame); everything else, with the
 * same arguments, is ``send`` (Producer.send bound to the producer). */

static PyObject *str_lanes, *str_seconds, *str_client, *str_fresh_until;

typedef struct {
    PyObject_HEAD
    PyObject *producer;
    PyObject *send;    /* the full send(), a bound method */
    PyObject *lanes;   /* producer._lanes (the same dict for the producer's life) */
    PyObject *seconds; /* producer._seconds */
    PyObject *client;  /* producer.client */
    vectorcallfunc vectorcall;
} FastSend;

static PyObject *
fast_send_call(FastSend *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs == 2 && kwnames == NULL && PyBytes_CheckExact(args[1])) {
        PyObject *lane = PyDict_GetItemWithError(self->lanes, args[0]); /* borrowed */
        if (lane == NULL && PyErr_Occurred())
            return NULL;
        if (lane != NULL && PyObject_TypeCheck(lane, &RecordBufferType)) {
            Py_INCREF(lane);
            PyObject *now_obj = PyObject_CallNoArgs(self->seconds);
            PyObject *fresh_obj = now_obj ? PyObject_GetAttr(self->client, str_fresh_until) : NULL;
            double now = now_obj ? PyFloat_AsDouble(now_obj) : -1.0;
            double fresh = fresh_obj ? PyFloat_AsDouble(fresh_obj) : -1.0;
            Py_XDECREF(now_obj);
            Py_XDECREF(fresh_obj);
            if (PyErr_Occurred()) {
                Py_DECREF(lane);
                return NULL;
            }
            PyObject *d = NULL;
            /* as Python's int(now * 1000), which truncates too */
            if (now < fresh && now * 1000.0 < 9.2e18 && now * 1000.0 > -9.2e18)
                d = rb_add_impl((RecordBuffer *)lane, args[1], (long long)(now * 1000.0),
                                self->producer);
            else
                d = Py_NewRef(Py_None);
            Py_DECREF(lane);
            if (d != Py_None)
                return d; /* a Deferred, or NULL with the error */
            Py_DECREF(d);
        }
    }
    return PyObject_Vectorcall(self->send, args, nargsf, kwnames);
}

static PyObject *
fast_send_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *producer, *send;
    if (!PyArg_ParseTuple(args, "OO:FastSend", &producer, &send))
        return NULL;
    FastSend *self = (FastSend *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)fast_send_call;
    self->producer = Py_NewRef(producer);
    self->send = Py_NewRef(send);
    self->lanes = PyObject_GetAttr(producer, str_lanes);
    self->seconds = self->lanes ? PyObject_GetAttr(producer, str_seconds) : NULL;
    self->client = self->seconds ? PyObject_GetAttr(producer, str_client) : NULL;
    if (self->client == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    if (!PyDict_CheckExact(self->lanes)) {
        PyErr_SetString(PyExc_TypeError, "producer._lanes must be a dict");
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
fast_send_traverse(FastSend *self, visitproc visit, void *arg)
{
    Py_VISIT(self->producer);
    Py_VISIT(self->send);
    Py_VISIT(self->lanes);
    Py_VISIT(self->seconds);
    Py_VISIT(self->client);
    return 0;
}

static int
fast_send_clear(FastSend *self)
{
    Py_CLEAR(self->producer);
    Py_CLEAR(self->send);
    Py_CLEAR(self->lanes);
    Py_CLEAR(self->seconds);
    Py_CLEAR(self->client);
    return 0;
}

static void
fast_send_dealloc(FastSend *self)
{
    PyObject_GC_UnTrack(self);
    fast_send_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
fast_send_get_wrapped(FastSend *self, void *closure)
{
    if (self->send == NULL)
        Py_RETURN_NONE;
    return Py_NewRef(self->send);
}

static PyObject *
fast_send_get_doc(FastSend *self, void *closure)
{
    if (self->send == NULL)
        Py_RETURN_NONE;
    return PyObject_GetAttrString(self->send, "__doc__");
}

static PyGetSetDef fast_send_getset[] = {
    /* inspect.signature() and help() follow __wrapped__ to Producer.send */
    {"__wrapped__", (getter)fast_send_get_wrapped, NULL, "the full send()", NULL},
    {"__doc__", (getter)fast_send_get_doc, NULL, NULL, NULL},
    {NULL},
};

static PyTypeObject FastSendType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pluglog._producerbuffer.FastSend",
    .tp_basicsize = sizeof(FastSend),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(FastSend, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)fast_send_traverse,
    .tp_clear = (inquiry)fast_send_clear,
    .tp_dealloc = (destructor)fast_send_dealloc,
    .tp_getset = fast_send_getset,
    .tp_new = fast_send_new,
};

static PyObject *
set_deferred_type(PyObject *self, PyObject *cls)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "set_deferred_type() takes a class");
        return NULL;
    }
    Py_XSETREF(deferred_type, Py_NewRef(cls));
    Py_RETURN_NONE;
}

static PyObject *
track(PyObject *self, PyObject *obj)
{
    if (PyObject_IS_GC(obj) && !PyObject_GC_IsTracked(obj))
        PyObject_GC_Track(obj);
    Py_RETURN_NONE;
}

/* Whether an object may have weak references. A negative offset (managed
 * weak references, Python 3.12+) cannot be read here: assume it may. */
static int
has_weakrefs(PyObject *obj)
{
    Py_ssize_t at = Py_TYPE(obj)->tp_weaklistoffset;
    if (at < 0)
        return 1;
    return at > 0 && *(PyObject **)((char *)obj + at) != NULL;
}

/* Whether an attribute (of the instance or its class) is true. */
static int
attr_true(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int on = PyObject_IsTrue(v);
    Py_DECREF(v);
    return on;
}

/* fire_acks(deferreds, topic, partition, base_offset, timestamp, meta_cls):
 * see pluglog.client.batches.fire_acks, of which this is the C version. */
static PyObject *
fire_acks(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyList_Check(args[0]) || !PyType_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "fire_acks(deferreds: list, topic, partition, "
                                         "base_offset, timestamp, meta_cls)");
        return NULL;
    }
    PyObject *deferreds = args[0];
    PyTypeObject *meta_cls = (PyTypeObject *)args[5];
    long long offset = PyLong_AsLongLong(args[3]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    int counting = offset >= 0;
    /* The list may change under callbacks: hold it and index it afresh. */
    Py_INCREF(deferreds);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(deferreds); i++, offset += counting) {
        PyObject *d = PyList_GET_ITEM(deferreds, i);
        if (Py_REFCNT(d) == 1 && !has_weakrefs(d)) {
            /* Only this list holds it: if it has no callbacks either (an
             * untracked one never had a callback list made), nobody can see
             * it fire. */
            int chain = PyObject_GC_IsTracked(d) ? attr_true(d, str_chain) : 0;
            if (chain < 0)
                goto fail;
            if (!chain)
                continue;
        }
        Py_INCREF(d);
        if (PyObject_IS_GC(d) && !PyObject_GC_IsTracked(d))
            PyObject_GC_Track(d);
        PyObject *meta = meta_cls->tp_alloc(meta_cls, 4);
        PyObject *off = PyLong_FromLongLong(offset);
        if (meta == NULL || off == NULL) {
            Py_XDECREF(meta);
            Py_XDECREF(off);
            goto fail;
        }
        PyTuple_SET_ITEM(meta, 0, Py_NewRef(args[1]));
        PyTuple_SET_ITEM(meta, 1, Py_NewRef(args[2]));
        PyTuple_SET_ITEM(meta, 2, off);
        PyTuple_SET_ITEM(meta, 3, Py_NewRef(args[4]));
        /* What callback() leaves behind when the chain is empty (the Python
         * fire_acks' test, attribute for attribute). */
        int chain = attr_true(d, str_chain), paused = 0, called = 0, debug = 0;
        if (chain == 0)
            paused = attr_true(d, str_paused);
        if (chain == 0 && paused == 0)
            called = attr_true(d, str_called);
        if (chain == 0 && paused == 0 && called == 0)
            debug = attr_true(d, str_debug);
        int rc;
        if (chain < 0 || paused < 0 || called < 0 || debug < 0) {
            rc = -1;
        }
        else if (!chain && !paused && !called && !debug) {
            rc = PyObject_SetAttr(d, str_called, Py_True);
            if (rc == 0)
                rc = PyObject_SetAttr(d, str_result, meta);
        }
        else {
            PyObject *r = PyObject_CallMethodOneArg(d, str_callback, meta);
            rc = r == NULL ? -1 : 0;
            Py_XDECREF(r);
        }
        Py_DECREF(meta);
        Py_DECREF(d);
        if (rc < 0)
            goto fail;
    }
    Py_DECREF(deferreds);
    Py_RETURN_NONE;
fail:
    Py_DECREF(deferreds);
    return NULL;
}

static PyMethodDef methods[] = {
    {"set_deferred_type", set_deferred_type, METH_O, "the class add() makes Deferreds of"},
    {"track", track, METH_O, "put an object back under the cyclic garbage collector"},
    {"fire_acks", (PyCFunction)(void (*)(void))fire_acks, METH_FASTCALL,
     "fire_acks(deferreds, topic, partition, base_offset, timestamp, meta_cls)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pluglog._producerbuffer",
    "The Twisted producer's per-record path in C (see the C source).", -1, methods,
};

#define INTERN(var, text)                                                        \
    if ((var = PyUnicode_InternFromString(text)) == NULL)                         \
        return NULL

PyMODINIT_FUNC
PyInit__producerbuffer(void)
{
    INTERN(str_buffered_bytes, "buffered_bytes");
    INTERN(str_buffer_memory, "_buffer_memory");
    INTERN(str_unacked, "unacked");
    INTERN(str_debug, "debug");
    INTERN(str_chain, "_chain");
    INTERN(str_paused, "paused");
    INTERN(str_called, "called");
    INTERN(str_result, "result");
    INTERN(str_callback, "callback");
    INTERN(str_lanes, "_lanes");
    INTERN(str_seconds, "_seconds");
    INTERN(str_client, "client");
    INTERN(str_fresh_until, "fresh_until");
    if (empty_tuple == NULL && (empty_tuple = PyTuple_New(0)) == NULL)
        return NULL;
    if (PyType_Ready(&RecordBufferType) < 0 || PyType_Ready(&FastSendType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "RecordBuffer", (PyObject *)&RecordBufferType) < 0 ||
        PyModule_AddObjectRef(m, "FastSend", (PyObject *)&FastSendType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
