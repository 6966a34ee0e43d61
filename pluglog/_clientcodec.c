/* pluglog._clientcodec: the Twisted client's per-record codec in C.
 *
 * encode_record(key, value, headers, timestamp_delta, offset_delta) returns
 * one magic-2 record's bytes, length prefix included, exactly as
 * pluglog.protocol.records.encode_record_fields does (key and value: any
 * bytes-like object or None; headers: a sequence of (name, value) pairs, name
 * str (UTF-8) or bytes, value bytes-like or None).
 *
 * decode_consumer_records(data, count, base_offset, base_timestamp,
 * min_offset, cls, topic, partition, timestamp_type, append_time) decodes
 * ``count`` records of the uncompressed record array ``data`` into ``cls``
 * tuples (topic, partition, offset, timestamp, timestamp_type, key, value,
 * headers) -- the client's ConsumerRecord -- skipping offsets below
 * ``min_offset``; an ``append_time`` other than None replaces every record's
 * timestamp (LogAppendTime). It refuses the same framing faults as
 * records.decode_records (raising ValueError naming the fault).
 *
 * Why C: in Python each record costs several microseconds of varint and
 * slicing work on both sides; this is the per-record part of the client's
 * hot path, and the 1M-record benchmark is bound by it
 * (bench/RESULTS.md). tests/unit/test_client_codec.py holds both functions
 * to the Python reference (Hypothesis).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_zigzag.h"

/* -- encode ---------------------------------------------------------------- */

/* One optional bytes field: a buffer (view->buf != NULL) or null. */
typedef struct {
    Py_buffer view;
    int held;
    PyObject *owned; /* the UTF-8 bytes of a str header name */
} field_t;

static int
get_field(PyObject *obj, field_t *field, const char *what, int str_ok)
{
    field->held = 0;
    field->owned = NULL;
    field->view.buf = NULL;
    field->view.len = -1;
    if (obj == Py_None)
        return 0;
    if (str_ok && PyUnicode_Check(obj)) {
        field->owned = PyUnicode_AsUTF8String(obj);
        if (field->owned == NULL)
            return -1;
        obj = field->owned;
    }
    if (PyObject_GetBuffer(obj, &field->view, PyBUF_SIMPLE) < 0) {
        Py_CLEAR(field->owned);
        PyErr_Format(PyExc_TypeError, "%s must be bytes-like or None, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    field->held = 1;
    return 0;
}

static void
release_field(field_t *field)
{
    if (field->held)
        PyBuffer_Release(&field->view);
    Py_CLEAR(field->owned);
    field->held = 0;
}

static Py_ssize_t
field_size(field_t *field)
{
    if (!field->held)
        return 1; /* varint -1 */
    return zigzag_size(field->view.len) + field->view.len;
}

static unsigned char *
put_field(unsigned char *out, field_t *field)
{
    if (!field->held)
        return put_zigzag(out, -1);
    out = put_zigzag(out, field->view.len);
    memcpy(out, field->view.buf, field->view.len);
    return out + field->view.len;
}

static PyObject *
encode_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_record(key, value, headers, timestamp_delta, offset_delta)");
        return NULL;
    }
    long long ts_delta = PyLong_AsLongLong(args[3]);
    if (ts_delta == -1 && PyErr_Occurred())
        return NULL;
    long long offset_delta = PyLong_AsLongLong(args[4]);
    if (offset_delta == -1 && PyErr_Occurred())
        return NULL;
    if (offset_delta < INT32_MIN || offset_delta > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%lld does not fit a varint (int32)", offset_delta);
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *headers = NULL;
    field_t key, value;
    field_t *hfields = NULL;
    Py_ssize_t nheaders = 0, got = 0;
    key.held = value.held = 0;
    key.owned = value.owned = NULL;
    if (get_field(args[0], &key, "key", 0) < 0 || get_field(args[1], &value, "value", 0) < 0)
        goto done;
    if (args[2] != Py_None) {
        headers = PySequence_Fast(args[2], "headers must be a sequence of (name, value) pairs");
        if (headers == NULL)
            goto done;
        nheaders = PySequence_Fast_GET_SIZE(headers);
    }
    if (nheaders > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many headers");
        goto done;
    }
    Py_ssize_t body = 1 + zigzag_size(ts_delta) + zigzag_size(offset_delta) +
                      field_size(&key) + field_size(&value) + zigzag_size(nheaders);
    if (nheaders) {
        hfields = PyMem_Calloc(2 * nheaders, sizeof(field_t));
        if (hfields == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (; got < nheaders; got++) {
            PyObject *pair = PySequence_Fast_GET_ITEM(headers, got);
            PyObject *name, *hvalue;
            if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2) {
                name = PyTuple_GET_ITEM(pair, 0);
                hvalue = PyTuple_GET_ITEM(pair, 1);
            }
            else if (PyList_Check(pair) && PyList_GET_SIZE(pair) == 2) {
                name = PyList_GET_ITEM(pair, 0);
                hvalue = PyList_GET_ITEM(pair, 1);
            }
            else {
                PyErr_SetString(PyExc_TypeError, "a header must be a (name, value) pair");
                goto done;
            }
            if (name == Py_None) {
                PyErr_SetString(PyExc_TypeError, "a header name must be str or bytes");
                goto done;
            }
            if (get_field(name, &hfields[2 * got], "a header name", 1) < 0)
                goto done;
            if (get_field(hvalue, &hfields[2 * got + 1], "a header value", 0) < 0) {
                release_field(&hfields[2 * got]);
                goto done;
            }
            body += field_size(&hfields[2 * got]) + field_size(&hfields[2 * got + 1]);
        }
    }
    result = PyBytes_FromStringAndSize(NULL, zigzag_size(body) + body);
    if (result == NULL)
        goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    out = put_zigzag(out, body);
    *out++ = 0; /* attributes */
    out = put_zigzag(out, ts_delta);
    out = put_zigzag(out, offset_delta);
    out = put_field(out, &key);
    out = put_field(out, &value);
    out = put_zigzag(out, nheaders);
    for (Py_ssize_t i = 0; i < 2 * nheaders; i++)
        out = put_field(out, &hfields[i]);
done:
    release_field(&key);
    release_field(&value);
    if (hfields != NULL) {
        for (Py_ssize_t i = 0; i < 2 * got; i++)
            release_field(&hfields[i]);
        PyMem_Free(hfields);
    }
    Py_XDECREF(headers);
    return result;
}

/* -- decode ---------------------------------------------------------------- */

/* A zig-zag varlong as records.decode_varlong reads it: at most 10 bytes and
 * no bits beyond 64. 0: ok; -1: runs past the end; -2: too long; -3: overflow. */
static int
read_varlong(const unsigned char *data, Py_ssize_t size, Py_ssize_t *pos, int64_t *out)
{
    uint64_t number = 0;
    for (int i = 0; i < 10; i++) {
        if (*pos + i >= size)
            return -1;
        unsigned char byte = data[*pos + i];
        if (i == 9 && (byte & 0x7E))
            return -3;
        number |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            *pos += i + 1;
            *out = (int64_t)((number >> 1) ^ (~(number & 1) + 1));
            return 0;
        }
    }
    return -2;
}

/* A zig-zag varint as records.decode_varint reads it (header fields): at most
 * 5 bytes and no more than 32 bits. Same return codes, -2 "longer than 5". */
static int
read_varint32(const unsigned char *data, Py_ssize_t size, Py_ssize_t *pos, int64_t *out)
{
    uint64_t number = 0;
    for (int i = 0; i < 5; i++) {
        if (*pos + i >= size)
            return -1;
        unsigned char byte = data[*pos + i];
        number |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            if (number > 0xFFFFFFFFu)
                return -4;
            *pos += i + 1;
            *out = (int64_t)((number >> 1) ^ (~(number & 1) + 1));
            return 0;
        }
    }
    return -5;
}

static const char *const VARINT_FAULTS[] = {
    "", "varint runs past the end of the buffer", "varint longer than 10 bytes",
    "varlong overflows int64", "varint overflows int32", "varint longer than 5 bytes"};

#define VARLONG(target)                                                          \
    do {                                                                         \
        int rc_ = read_varlong(data, size, &pos, &(target));                     \
        if (rc_ < 0) {                                                           \
            PyErr_SetString(PyExc_ValueError, VARINT_FAULTS[-rc_]);              \
            goto fail;                                                           \
        }                                                                        \
    } while (0)

#define VARINT32(target)                                                         \
    do {                                                                         \
        int rc_ = read_varint32(data, size, &pos, &(target));                    \
        if (rc_ < 0) {                                                           \
            PyErr_SetString(PyExc_ValueError, VARINT_FAULTS[-rc_]);              \
            goto fail;                                                           \
        }                                                                        \
    } while (0)

#define FAULT(message)                                                           \
    do {                                                                         \
        PyErr_SetString(PyExc_ValueError, (message));                            \
        goto fail;                                                               \
    } while (0)

/* a + b as a Python int, exact past int64 too (as the Python reference,
 * whose ints do not wrap). */
static PyObject *
exact_sum(long long a, long long b)
{
    long long sum;
    if (!__builtin_add_overflow(a, b, &sum))
        return PyLong_FromLongLong(sum);
    PyObject *pa = PyLong_FromLongLong(a), *pb = PyLong_FromLongLong(b), *out = NULL;
    if (pa != NULL && pb != NULL)
        out = PyNumber_Add(pa, pb);
    Py_XDECREF(pa);
    Py_XDECREF(pb);
    return out;
}

static PyObject *
decode_consumer_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_consumer_records(data, count, base_offset, base_timestamp, "
                        "min_offset, cls, topic, partition, timestamp_type, append_time)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *records = NULL, *ts_type = NULL, *headers = NULL, *key = NULL, *value = NULL;
    PyObject *offset_obj = NULL, *ts_obj = NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base_offset = PyLong_AsLongLong(args[2]);
    long long base_ts = PyLong_AsLongLong(args[3]);
    long long min_offset = PyLong_AsLongLong(args[4]);
    /* None: each record's own timestamp; else LogAppendTime for all. */
    int log_append = args[9] != Py_None;
    long long append_time = log_append ? PyLong_AsLongLong(args[9]) : 0;
    if (PyErr_Occurred())
        goto fail;
    PyTypeObject *cls = (PyTypeObject *)args[5];
    if (!PyType_Check(args[5]) || !PyType_IsSubtype(cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "cls must be a tuple subclass");
        goto fail;
    }
    PyObject *topic = args[6], *partition = args[7];
    ts_type = args[8];
    Py_INCREF(ts_type);
    records = PyList_New(0);
    if (records == NULL)
        goto fail;
    const unsigned char *data = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len, pos = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, ts_delta, offset_delta, n, header_count;
        VARLONG(length);
        Py_ssize_t end = pos + length;
        if (length < 0 || length > size - pos)
            FAULT("record length runs past the end of the batch");
        if (pos + 1 > end)
            FAULT("record length does not match its fields");
        pos += 1; /* attributes: unused */
        VARLONG(ts_delta);
        VARLONG(offset_delta);
        if (offset_delta < INT32_MIN || offset_delta > INT32_MAX)
            FAULT("varint overflows int32");
        VARLONG(n);
        if (n >= 0 && n > end - pos)
            FAULT("record field runs past the end of the batch");
        Py_ssize_t key_at = pos, key_len = n;
        if (n > 0)
            pos += n;
        VARLONG(n);
        if (n >= 0 && n > end - pos)
            FAULT("record field runs past the end of the batch");
        Py_ssize_t value_at = pos, value_len = n;
        if (n > 0)
            pos += n;
        VARLONG(header_count);
        if (header_count < 0)
            header_count = 0; /* as the Python reference: range() of it */
        headers = PyList_New(0);
        if (headers == NULL)
            goto fail;
        for (int64_t h = 0; h < header_count; h++) {
            int64_t name_len, hvalue_len;
            VARINT32(name_len);
            if (name_len > size - pos)
                FAULT("record field runs past the end of the batch");
            Py_ssize_t name_at = pos;
            if (name_len > 0)
                pos += name_len;
            VARINT32(hvalue_len);
            if (hvalue_len > size - pos)
                FAULT("record field runs past the end of the batch");
            if (name_len < 0)
                FAULT("a record header has a null name");
            PyObject *name = PyUnicode_DecodeUTF8((const char *)data + name_at, name_len, NULL);
            if (name == NULL)
                goto fail;
            PyObject *hvalue;
            if (hvalue_len < 0) {
                hvalue = Py_NewRef(Py_None);
            }
            else {
                hvalue = PyBytes_FromStringAndSize((const char *)data + pos, hvalue_len);
                pos += hvalue_len;
            }
            if (hvalue == NULL) {
                Py_DECREF(name);
                goto fail;
            }
            PyObject *pair = PyTuple_Pack(2, name, hvalue);
            Py_DECREF(name);
            Py_DECREF(hvalue);
            if (pair == NULL || PyList_Append(headers, pair) < 0) {
                Py_XDECREF(pair);
                goto fail;
            }
            Py_DECREF(pair);
        }
        if (pos != end)
            FAULT("record length does not match its fields");
        long long offset;
        int below;
        if (__builtin_add_overflow(base_offset, (long long)offset_delta, &offset))
            below = offset_delta < 0; /* past int64: below min_offset only downwards */
        else
            below = offset < min_offset;
        if (below) {
            Py_CLEAR(headers);
            continue;
        }
        key = key_len < 0 ? Py_NewRef(Py_None)
                          : PyBytes_FromStringAndSize((const char *)data + key_at, key_len);
        value = value_len < 0 ? Py_NewRef(Py_None)
                              : PyBytes_FromStringAndSize((const char *)data + value_at,
                                                          value_len);
        offset_obj = exact_sum(base_offset, offset_delta);
        ts_obj = log_append ? PyLong_FromLongLong(append_time) : exact_sum(base_ts, ts_delta);
        if (key == NULL || value == NULL || offset_obj == NULL || ts_obj == NULL)
            goto fail;
        /* As tuple.__new__ of a subclass fills its instance. */
        PyObject *record = cls->tp_alloc(cls, 8);
        if (record == NULL)
            goto fail;
        PyTuple_SET_ITEM(record, 0, Py_NewRef(topic));
        PyTuple_SET_ITEM(record, 1, Py_NewRef(partition));
        PyTuple_SET_ITEM(record, 2, offset_obj);
        PyTuple_SET_ITEM(record, 3, ts_obj);
        PyTuple_SET_ITEM(record, 4, Py_NewRef(ts_type));
        PyTuple_SET_ITEM(record, 5, key);
        PyTuple_SET_ITEM(record, 6, value);
        PyTuple_SET_ITEM(record, 7, headers);
        offset_obj = ts_obj = key = value = headers = NULL;
        int rc = PyList_Append(records, record);
        Py_DECREF(record);
        if (rc < 0)
            goto fail;
    }
    PyBuffer_Release(&view);
    Py_DECREF(ts_type);
    return records;
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(ts_type);
    Py_XDECREF(records);
    Py_XDECREF(headers);
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(offset_obj);
    Py_XDECREF(ts_obj);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode_record", (PyCFunction)(void (*)(void))encode_record, METH_FASTCALL,
     "encode_record(key, value, headers, timestamp_delta, offset_delta) -> bytes"},
    {"decode_consumer_records", (PyCFunction)(void (*)(void))decode_consumer_records,
     METH_FASTCALL,
     "decode_consumer_records(data, count, base_offset, base_timestamp, min_offset, cls, "
     "topic, partition, timestamp_type, append_time) -> list"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pluglog._clientcodec",
    "The Twisted client's per-record codec in C (see the C source).", -1, methods,
};

PyMODINIT_FUNC
PyInit__clientcodec(void)
{
    return PyModule_Create(&module);
}
