/* The per-request frozen objects made in C (gateway.frozen.positional_maker, when the build holds this module).
 *
 * maker(cls, members) returns a callable that takes one value per member, positionally, and returns a new instance
 * of ``cls`` whose slots hold them: what ``cls(*values)`` makes of a frozen, slotted dataclass whose ``__init__``
 * only sets its fields in order (``gateway.frozen`` checks that before it asks for a maker). The instance is
 * allocated as ``object.__new__(cls)`` allocates it (``cls``'s own ``tp_alloc``: zeroed, tracked by the collector
 * when the class is), then each slot is set where its member descriptor would set it. A call with another number
 * of values, or with keywords, raises ``TypeError`` and makes nothing.
 *
 * ``members``: the member descriptor of each field, in the field order (``cls.__dict__[name]``); each must be an
 * object slot (``T_OBJECT_EX``, writable) of ``cls`` itself, else ``TypeError``.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    Py_ssize_t count;
    Py_ssize_t *offsets;
} Maker;

static PyObject *maker_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Maker *maker = (Maker *)self;
    Py_ssize_t given = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) {
        PyErr_Format(PyExc_TypeError, "a %s maker takes its values positionally", maker->cls->tp_name);
        return NULL;
    }
    if (given != maker->count) {
        PyErr_Format(PyExc_TypeError, "a %s maker takes %zd values (%zd given)", maker->cls->tp_name, maker->count,
                     given);
        return NULL;
    }
    PyObject *made = maker->cls->tp_alloc(maker->cls, 0);
    if (made == NULL) return NULL;
    for (Py_ssize_t i = 0; i < given; i++) {
        PyObject *value = args[i];
        Py_INCREF(value);
        *(PyObject **)((char *)made + maker->offsets[i]) = value;
    }
    return made;
}

static void maker_dealloc(PyObject *self) {
    Maker *maker = (Maker *)self;
    Py_XDECREF(maker->cls);
    PyMem_Free(maker->offsets);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *maker_repr(PyObject *self) {
    return PyUnicode_FromFormat("<maker of %s>", ((Maker *)self)->cls->tp_name);
}

static PyTypeObject MakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gateway._frozen_make.Maker",
    .tp_basicsize = sizeof(Maker),
    .tp_dealloc = maker_dealloc,
    .tp_vectorcall_offset = offsetof(Maker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = maker_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Makes instances of one class from one value per slot, positionally.",
};

static PyObject *make_maker(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *cls, *members;
    if (!PyArg_ParseTuple(args, "O!O!:maker", &PyType_Type, &cls, &PyTuple_Type, &members)) return NULL;
    PyTypeObject *type = (PyTypeObject *)cls;
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_alloc == NULL || type->tp_itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "%s: not a class of fixed-size instances", type->tp_name);
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(members);
    Py_ssize_t *offsets = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(count > 0 ? count : 1));
    if (offsets == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *member = PyTuple_GET_ITEM(members, i);
        if (!Py_IS_TYPE(member, &PyMemberDescr_Type) || PyDescr_TYPE(member) != type) {
            PyMem_Free(offsets);
            PyErr_Format(PyExc_TypeError, "%s: value %zd is not a slot of the class", type->tp_name, i);
            return NULL;
        }
        PyMemberDef *def = ((PyMemberDescrObject *)member)->d_member;
        if (def->type != T_OBJECT_EX || (def->flags & READONLY) || def->offset < (Py_ssize_t)sizeof(PyObject) ||
            def->offset + (Py_ssize_t)sizeof(PyObject *) > type->tp_basicsize) {
            PyMem_Free(offsets);
            PyErr_Format(PyExc_TypeError, "%s: value %zd is not a writable object slot", type->tp_name, i);
            return NULL;
        }
        offsets[i] = def->offset;
    }
    Maker *maker = PyObject_New(Maker, &MakerType);
    if (maker == NULL) {
        PyMem_Free(offsets);
        return NULL;
    }
    maker->vectorcall = maker_vectorcall;
    Py_INCREF(cls);
    maker->cls = type;
    maker->count = count;
    maker->offsets = offsets;
    return (PyObject *)maker;
}

static PyMethodDef methods[] = {
    {"maker", make_maker, METH_VARARGS, "maker(cls, members): a callable making cls from one value per member."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gateway._frozen_make",
    .m_doc = "Frozen slotted objects made from their values (gateway.frozen).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__frozen_make(void) {
    if (PyType_Ready(&MakerType) < 0) return NULL;
    return PyModule_Create(&module);
}
