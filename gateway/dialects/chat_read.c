/* The meter's read of a chat stream's kept chunks in one pass over their bytes (gateway.dialects.chat_native).
 *
 * read_kept(heads, datas, parts, times) reads every kept entry (entry i is heads[i] + datas[i]; an index in
 * parts is one event's data, any other entry whole chunks of "data: {...}\n\n" events) when every event is of the
 * strict shape of OpenAI-style chat chunks: an object whose keys are among the few below, each with a value of the
 * kind it takes, and no others. It returns what ``tally_chunks`` would add to a tally:
 *
 *   (text, times, model, finish, usages, counted, events)
 *
 * text: the events' non-empty ``delta.content`` strings decoded and joined (None: none); times: the arrival of each
 * event that held one (a list of floats); model: the first ``model`` string; finish: the last non-empty
 * ``finish_reason``; usages: each ``usage`` object's bytes, in order (decoded by msgspec in Python); counted:
 * whether the last event held text; events: how many events were read.
 *
 * Anything else returns None and the entries are read as before: a key not listed, a key twice, a value of another
 * kind, whitespace other than spaces and tabs, an SSE line other than "data: {", raw control bytes or invalid UTF-8
 * in a string, a lone surrogate escape, an escape in a key or in a string that is not a text (id, model, ...).
 * The strings read (texts, model, finish) are decoded exactly as JSON decoders do; strings skipped hold printable
 * ASCII only, so that every decoder takes them alike.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct {
    char *text;
    Py_ssize_t text_len, text_cap;
    PyObject *times;   /* list of floats */
    PyObject *model;   /* str or NULL */
    PyObject *finish;  /* str or NULL */
    PyObject *usages;  /* list of bytes or NULL */
    int counted;       /* the current event held text */
    Py_ssize_t events;
    double at;
    /* What the template (read_kept) is learnt from: where the head ends in the bytes read (NULL: no head), and in
     * the current event, the end of the text that begins there, the texts, finishes and usages read, the last
     * padding (``obfuscation``'s string). */
    const unsigned char *mark, *text_end, *pad_start, *pad_end;
    Py_ssize_t lead; /* the text's bytes before the mark */
    int texts, extras;
} Out;

typedef const unsigned char *Ptr;

/* A refusal: the entries are not of the shape (no Python error set). Errors (memory) set one and return -2. */
#define REFUSE (-1)
#define FAIL (-2)

static inline Ptr skip_spaces(Ptr p, Ptr end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

static int grow(Out *o, Py_ssize_t more) {
    Py_ssize_t need = o->text_len + more;
    if (need <= o->text_cap) return 0;
    Py_ssize_t cap = o->text_cap ? o->text_cap : 1024;
    while (cap < need) cap *= 2;
    char *text = PyMem_Realloc(o->text, (size_t)cap);
    if (text == NULL) {
        PyErr_NoMemory();
        return FAIL;
    }
    o->text = text;
    o->text_cap = cap;
    return 0;
}

/* The length of the UTF-8 sequence at p (strict: no overlong form, no surrogate, nothing past U+10FFFF), 0 if
 * invalid. */
static inline int utf8_length(Ptr p, Ptr end) {
    unsigned char c = p[0];
    if (c >= 0xC2 && c <= 0xDF) {
        return (end - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (end - p < 3 || (p[2] & 0xC0) != 0x80) return 0;
        unsigned char d = p[1];
        if (c == 0xE0) return (d >= 0xA0 && d <= 0xBF) ? 3 : 0;
        if (c == 0xED) return (d >= 0x80 && d <= 0x9F) ? 3 : 0;
        return (d & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (end - p < 4 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        unsigned char d = p[1];
        if (c == 0xF0) return (d >= 0x90 && d <= 0xBF) ? 4 : 0;
        if (c == 0xF4) return (d >= 0x80 && d <= 0x8F) ? 4 : 0;
        return (d & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

static inline int hex4(Ptr p, unsigned *value) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *value = v;
    return 1;
}

/* A text: the JSON string at *pp (after its opening quote) decoded into o->text; *pp left after its closing quote.
 * Returns the decoded length, or REFUSE / FAIL. */
static Py_ssize_t read_text(Ptr *pp, Ptr end, Out *o) {
    Ptr p = *pp;
    /* The bytes up to the closing quote decode to at most as many bytes. */
    Ptr run = p;
    while (run < end && *run != '"') run += (*run == '\\' && run + 1 < end) ? 2 : 1;
    if (run >= end) return REFUSE;
    if (grow(o, run - p) < 0) return FAIL;
    char *out = o->text + o->text_len;
    char *start = out;
    while (p < run) {
        unsigned char c = *p;
        if (c >= 0x20 && c < 0x80 && c != '\\') {
            *out++ = (char)c;
            p++;
            continue;
        }
        if (c < 0x20) return REFUSE;
        if (c >= 0x80) {
            int n = utf8_length(p, run);
            if (n == 0) return REFUSE;
            memcpy(out, p, (size_t)n);
            out += n;
            p += n;
            continue;
        }
        /* An escape. */
        if (run - p < 2) return REFUSE;
        unsigned char e = p[1];
        p += 2;
        switch (e) {
        case '"': *out++ = '"'; continue;
        case '\\': *out++ = '\\'; continue;
        case '/': *out++ = '/'; continue;
        case 'b': *out++ = '\b'; continue;
        case 'f': *out++ = '\f'; continue;
        case 'n': *out++ = '\n'; continue;
        case 'r': *out++ = '\r'; continue;
        case 't': *out++ = '\t'; continue;
        case 'u': break;
        default: return REFUSE;
        }
        unsigned cp;
        if (run - p < 4 || !hex4(p, &cp)) return REFUSE;
        p += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return REFUSE; /* a low surrogate alone */
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned low;
            if (run - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, &low)) return REFUSE;
            if (low < 0xDC00 || low > 0xDFFF) return REFUSE;
            p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        if (cp < 0x80) {
            *out++ = (char)cp;
        } else if (cp < 0x800) {
            *out++ = (char)(0xC0 | (cp >> 6));
            *out++ = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            *out++ = (char)(0xE0 | (cp >> 12));
            *out++ = (char)(0x80 | ((cp >> 6) & 0x3F));
            *out++ = (char)(0x80 | (cp & 0x3F));
        } else {
            *out++ = (char)(0xF0 | (cp >> 18));
            *out++ = (char)(0x80 | ((cp >> 12) & 0x3F));
            *out++ = (char)(0x80 | ((cp >> 6) & 0x3F));
            *out++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    *pp = run + 1;
    Py_ssize_t length = out - start;
    o->text_len += length;
    return length;
}

/* A string read by no one, or read whole (model, finish): printable ASCII, no escape. Returns its length after the
 * opening quote (at *pp), *pp left after the closing quote; REFUSE otherwise. */
static inline Py_ssize_t plain_string(Ptr *pp, Ptr end) {
    Ptr p = *pp;
    Ptr start = p;
    while (p < end && *p >= 0x20 && *p < 0x7F && *p != '"' && *p != '\\') p++;
    if (p >= end || *p != '"') return REFUSE;
    *pp = p + 1;
    return p - start;
}

static inline int literal(Ptr *pp, Ptr end, const char *word, Py_ssize_t length) {
    if (end - *pp < length || memcmp(*pp, word, (size_t)length) != 0) return 0;
    *pp += length;
    return 1;
}

/* An integer (JSON's form, at most 18 digits): *pp moved past it; 0 if none. */
static inline int integer(Ptr *pp, Ptr end) {
    Ptr p = *pp;
    if (p < end && *p == '-') p++;
    Ptr digits = p;
    while (p < end && *p >= '0' && *p <= '9') p++;
    Py_ssize_t n = p - digits;
    if (n == 0 || n > 18 || (n > 1 && *digits == '0')) return 0;
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return 0;
    *pp = p;
    return 1;
}

/* Any JSON value, skipped (its strings' contents are checked by msgspec when it is decoded): 0 if it is none. */
static int skip_value(Ptr *pp, Ptr end, int depth);

static int skip_string(Ptr *pp, Ptr end) {
    Ptr p = *pp + 1;
    while (p < end && *p != '"') {
        if (*p < 0x20) return 0;
        p += (*p == '\\') ? 2 : 1;
    }
    if (p >= end) return 0;
    *pp = p + 1;
    return 1;
}

static int skip_number(Ptr *pp, Ptr end) {
    Ptr p = *pp;
    if (p < end && *p == '-') p++;
    if (p >= end) return 0;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < end && *p >= '0' && *p <= '9') p++;
    else return 0;
    if (p < end && *p == '.') {
        p++;
        Ptr digits = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == digits) return 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        Ptr digits = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == digits) return 0;
    }
    *pp = p;
    return 1;
}

static int skip_value(Ptr *pp, Ptr end, int depth) {
    Ptr p = skip_spaces(*pp, end);
    if (p >= end || depth > 32) return 0;
    unsigned char c = *p;
    if (c == '"') {
        if (!skip_string(&p, end)) return 0;
    } else if (c == '{' || c == '[') {
        unsigned char close = c == '{' ? '}' : ']';
        p = skip_spaces(p + 1, end);
        if (p < end && *p == close) {
            p++;
        } else {
            for (;;) {
                if (c == '{') {
                    p = skip_spaces(p, end);
                    if (p >= end || *p != '"' || !skip_string(&p, end)) return 0;
                    p = skip_spaces(p, end);
                    if (p >= end || *p != ':') return 0;
                    p++;
                }
                if (!skip_value(&p, end, depth + 1)) return 0;
                p = skip_spaces(p, end);
                if (p >= end) return 0;
                if (*p == ',') {
                    p++;
                    continue;
                }
                if (*p != close) return 0;
                p++;
                break;
            }
        }
    } else if (c == 't') {
        if (!literal(&p, end, "true", 4)) return 0;
    } else if (c == 'f') {
        if (!literal(&p, end, "false", 5)) return 0;
    } else if (c == 'n') {
        if (!literal(&p, end, "null", 4)) return 0;
    } else if (!skip_number(&p, end)) {
        return 0;
    }
    *pp = p;
    return 1;
}

/* An object's key (no escape), *pp after its colon and the spaces after it: its bytes in *key, *length. */
static inline int read_key(Ptr *pp, Ptr end, Ptr *key, Py_ssize_t *length) {
    Ptr p = skip_spaces(*pp, end);
    if (p >= end || *p != '"') return 0;
    p++;
    *key = p;
    Py_ssize_t n = plain_string(&p, end);
    if (n < 0) return 0;
    *length = n;
    p = skip_spaces(p, end);
    if (p >= end || *p != ':') return 0;
    *pp = skip_spaces(p + 1, end);
    return 1;
}

/* After a member's value: a comma (1, *pp after it), the object's or array's close (0, *pp after it), else REFUSE. */
static inline int next_member(Ptr *pp, Ptr end, unsigned char close) {
    Ptr p = skip_spaces(*pp, end);
    if (p >= end) return REFUSE;
    if (*p == ',') {
        *pp = p + 1;
        return 1;
    }
    if (*p == close) {
        *pp = p + 1;
        return 0;
    }
    return REFUSE;
}

#define KEY(name) (length == (Py_ssize_t)sizeof(name) - 1 && memcmp(key, name, sizeof(name) - 1) == 0)
#define ONCE(bit)                           \
    do {                                    \
        if (seen & (1u << (bit))) return REFUSE; \
        seen |= 1u << (bit);                \
    } while (0)

static inline int null_value(Ptr *pp, Ptr end) { return literal(pp, end, "null", 4); }

/* A string read by no one, or null. */
static inline int skipped_string(Ptr *pp, Ptr end) {
    if (*pp < end && **pp == '"') {
        (*pp)++;
        return plain_string(pp, end) >= 0;
    }
    return null_value(pp, end);
}

/* Append ``item`` (a new reference, NULL when its making failed) to *list, made first when NULL; the reference is
   the list's after. 0, or FAIL with the error set. */
static int append_new(PyObject **list, PyObject *item) {
    if (item == NULL) return FAIL;
    if (*list == NULL && (*list = PyList_New(0)) == NULL) {
        Py_DECREF(item);
        return FAIL;
    }
    int failed = PyList_Append(*list, item);
    Py_DECREF(item);
    return failed ? FAIL : 0;
}

/* Members whose value is only checked, never read: a string or null (``SKIPPED``), or null alone (``NULL_ONLY``). */
enum { SKIPPED, NULL_ONLY };
typedef struct {
    const char *name;
    Py_ssize_t length;
    int kind;
} Checked;
#define CHECKED(name, kind) {name, (Py_ssize_t)sizeof(name) - 1, kind}

/* ``key`` looked up in ``table`` (``count`` entries, each allowed once: its bit in *seen is ``first_bit`` + its index)
   and its value checked: 1 when taken, REFUSE when not listed, repeated or not of its kind. */
static int checked_member(
    Ptr *pp, Ptr end, Ptr key, Py_ssize_t length, const Checked *table, int count, int first_bit, unsigned *seen) {
    for (int i = 0; i < count; i++) {
        if (table[i].length != length || memcmp(key, table[i].name, (size_t)length) != 0) continue;
        unsigned bit = 1u << (first_bit + i);
        if (*seen & bit) return REFUSE;
        *seen |= bit;
        int ok = table[i].kind == SKIPPED ? skipped_string(pp, end) : null_value(pp, end);
        return ok ? 1 : REFUSE;
    }
    return REFUSE;
}

static const Checked DELTA_CHECKED[] = {
    CHECKED("role", SKIPPED),
    CHECKED("refusal", NULL_ONLY),
    CHECKED("tool_calls", NULL_ONLY),
    CHECKED("function_call", NULL_ONLY),
    CHECKED("reasoning_content", NULL_ONLY),
    CHECKED("reasoning", NULL_ONLY),
    CHECKED("reasoning_details", NULL_ONLY),
};
static const Checked CHOICE_CHECKED[] = {
    CHECKED("logprobs", NULL_ONLY),
    CHECKED("text", NULL_ONLY),
    CHECKED("message", NULL_ONLY),
};
static const Checked EVENT_CHECKED[] = {
    CHECKED("id", SKIPPED),
    CHECKED("object", SKIPPED),
    CHECKED("system_fingerprint", SKIPPED),
    CHECKED("service_tier", SKIPPED),
};
#define COUNT(table) ((int)(sizeof(table) / sizeof((table)[0])))

static int read_delta(Ptr *pp, Ptr end, Out *o) {
    Ptr p = *pp + 1; /* after '{' */
    unsigned seen = 0;
    p = skip_spaces(p, end);
    if (p < end && *p == '}') {
        *pp = p + 1;
        return 0;
    }
    for (;;) {
        Ptr key;
        Py_ssize_t length;
        if (!read_key(&p, end, &key, &length)) return REFUSE;
        if (KEY("content")) {
            ONCE(0);
            if (p < end && *p == '"') {
                p++;
                Ptr text = p;
                Py_ssize_t n = read_text(&p, end, o);
                if (n < 0) return (int)n;
                o->texts++;
                if (o->mark != NULL && text <= o->mark && o->mark < p) {
                    o->text_end = p;
                    o->lead = o->mark - text;
                }
                if (n > 0 && !o->counted) {
                    o->counted = 1;
                    if (append_new(&o->times, PyFloat_FromDouble(o->at)) < 0) return FAIL;
                }
            } else if (!null_value(&p, end)) {
                return REFUSE;
            }
        } else if (checked_member(&p, end, key, length, DELTA_CHECKED, COUNT(DELTA_CHECKED), 1, &seen) < 0) {
            return REFUSE;
        }
        int more = next_member(&p, end, '}');
        if (more < 0) return REFUSE;
        if (!more) break;
    }
    *pp = p;
    return 0;
}

static int read_choice(Ptr *pp, Ptr end, Out *o) {
    Ptr p = skip_spaces(*pp, end);
    if (p >= end || *p != '{') return REFUSE;
    p = skip_spaces(p + 1, end);
    unsigned seen = 0;
    if (p < end && *p == '}') {
        *pp = p + 1;
        return 0;
    }
    for (;;) {
        Ptr key;
        Py_ssize_t length;
        if (!read_key(&p, end, &key, &length)) return REFUSE;
        if (KEY("delta")) {
            ONCE(0);
            if (p >= end || *p != '{') return REFUSE;
            int done = read_delta(&p, end, o);
            if (done < 0) return done;
        } else if (KEY("index")) {
            ONCE(1);
            if (!integer(&p, end)) return REFUSE;
        } else if (KEY("finish_reason")) {
            ONCE(2);
            if (p < end && *p == '"') {
                p++;
                Ptr start = p;
                Py_ssize_t n = plain_string(&p, end);
                if (n < 0) return REFUSE;
                if (n > 0) {
                    o->extras++;
                    PyObject *finish = PyUnicode_FromStringAndSize((const char *)start, n);
                    if (finish == NULL) return FAIL;
                    Py_XSETREF(o->finish, finish);
                }
            } else if (!null_value(&p, end)) {
                return REFUSE;
            }
        } else if (checked_member(&p, end, key, length, CHOICE_CHECKED, COUNT(CHOICE_CHECKED), 3, &seen) < 0) {
            return REFUSE;
        }
        int more = next_member(&p, end, '}');
        if (more < 0) return REFUSE;
        if (!more) break;
    }
    *pp = p;
    return 0;
}

/* One event: the object at *pp (its '{'), *pp left after its '}'. */
static int read_event(Ptr *pp, Ptr end, Out *o) {
    Ptr p = *pp;
    if (p >= end || *p != '{') return REFUSE;
    p = skip_spaces(p + 1, end);
    unsigned seen = 0;
    o->counted = 0;
    o->events++;
    o->text_end = o->pad_start = o->pad_end = NULL;
    o->texts = o->extras = 0;
    if (p < end && *p == '}') {
        *pp = p + 1;
        return 0;
    }
    for (;;) {
        Ptr key;
        Py_ssize_t length;
        if (!read_key(&p, end, &key, &length)) return REFUSE;
        if (KEY("choices")) {
            ONCE(0);
            if (p >= end || *p != '[') return REFUSE;
            p = skip_spaces(p + 1, end);
            if (p < end && *p == ']') {
                p++;
            } else {
                for (;;) {
                    int done = read_choice(&p, end, o);
                    if (done < 0) return done;
                    int more = next_member(&p, end, ']');
                    if (more < 0) return REFUSE;
                    if (!more) break;
                }
            }
        } else if (KEY("created")) {
            ONCE(1);
            if (!integer(&p, end)) return REFUSE;
        } else if (KEY("model")) {
            ONCE(2);
            if (p < end && *p == '"') {
                p++;
                Ptr start = p;
                Py_ssize_t n = plain_string(&p, end);
                if (n < 0) return REFUSE;
                if (o->model == NULL) {
                    o->model = PyUnicode_FromStringAndSize((const char *)start, n);
                    if (o->model == NULL) return FAIL;
                }
            } else if (!null_value(&p, end)) {
                return REFUSE;
            }
        } else if (KEY("obfuscation")) {
            ONCE(3);
            Ptr value = p;
            if (!skipped_string(&p, end)) return REFUSE;
            if (*value == '"') {
                o->pad_start = value + 1;
                o->pad_end = p - 1;
            }
        } else if (KEY("usage")) {
            ONCE(4);
            if (p < end && *p == '{') {
                Ptr start = p;
                if (!skip_value(&p, end, 0)) return REFUSE;
                o->extras++;
                if (append_new(&o->usages, PyBytes_FromStringAndSize((const char *)start, p - start)) < 0) return FAIL;
            } else if (!null_value(&p, end)) {
                return REFUSE;
            }
        } else if (checked_member(&p, end, key, length, EVENT_CHECKED, COUNT(EVENT_CHECKED), 5, &seen) < 0) {
            return REFUSE;
        }
        int more = next_member(&p, end, '}');
        if (more < 0) return REFUSE;
        if (!more) break;
    }
    *pp = p;
    return 0;
}

/* Whole chunks: one or more "data: {...}\n\n" events, nothing else. */
static int read_chunk(Ptr p, Ptr end, Out *o) {
    if (p >= end) return REFUSE;
    while (p < end) {
        if (end - p < 6 || memcmp(p, "data: ", 6) != 0) return REFUSE;
        p += 6;
        int done = read_event(&p, end, o);
        if (done < 0) return done;
        if (end - p < 2 || p[0] != '\n' || p[1] != '\n') return REFUSE;
        p += 2;
    }
    return 0;
}

/* The text's bytes in the head (its lead) are printable ASCII without an escape: the text read on from the head's end
 * decodes to the lead's bytes followed by the rest's (no escape nor character is split between the two). */
static int plain_lead(Ptr lead, Py_ssize_t length) {
    for (Py_ssize_t i = 0; i < length; i++)
        if (lead[i] < 0x20 || lead[i] >= 0x7F || lead[i] == '\\') return 0;
    return 1;
}

static PyObject *read_kept(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "read_kept(heads, datas, parts, times)");
        return NULL;
    }
    PyObject *heads = args[0], *datas = args[1], *parts = args[2];
    if (!PyList_CheckExact(heads) || !PyList_CheckExact(datas) || !PyList_CheckExact(parts)) {
        PyErr_SetString(PyExc_TypeError, "heads, datas and parts must be lists");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[3], &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    Py_ssize_t count = PyList_GET_SIZE(datas);
    PyObject *result = NULL;
    Out o = {0};
    int status = 0;
    char *joined = NULL;
    Py_ssize_t joined_cap = 0;
    /* The template (see below): the head it holds for, its bytes after the text, and when they hold a padding, the
     * bytes before it (the stem) and after it (the tail). */
    PyObject *t_head = NULL;
    Ptr t_suffix = NULL, t_tail = NULL;
    Py_ssize_t t_suffix_len = 0, t_stem_len = 0, t_tail_len = 0, t_lead = 0;
    int t_padded = 0;
    if (view.itemsize != (Py_ssize_t)sizeof(double) || view.format == NULL || strcmp(view.format, "d") != 0 ||
        view.len / view.itemsize != count || PyList_GET_SIZE(heads) != count) {
        PyErr_SetString(PyExc_TypeError, "times must be an array('d') as long as datas, heads too");
        goto done;
    }
    o.times = PyList_New(0);
    if (o.times == NULL) goto done;
    const double *arrivals = (const double *)view.buf;
    Py_ssize_t next_part = 0, parts_count = PyList_GET_SIZE(parts);
    Py_ssize_t part = -1;
    if (parts_count > 0) {
        part = PyLong_AsSsize_t(PyList_GET_ITEM(parts, 0));
        if (part == -1 && PyErr_Occurred()) goto done;
    }
    for (Py_ssize_t i = 0; i < count && status == 0; i++) {
        PyObject *head = PyList_GET_ITEM(heads, i), *data = PyList_GET_ITEM(datas, i);
        if (!PyBytes_CheckExact(head) || !PyBytes_CheckExact(data)) {
            status = REFUSE;
            break;
        }
        o.at = arrivals[i];
        Py_ssize_t head_len = PyBytes_GET_SIZE(head), data_len = PyBytes_GET_SIZE(data);
        Ptr bytes = (Ptr)PyBytes_AS_STRING(data);
        if (i == part) {
            next_part++;
            if (next_part < parts_count) {
                part = PyLong_AsSsize_t(PyList_GET_ITEM(parts, next_part));
                if (part == -1 && PyErr_Occurred()) goto done;
            }
            if (head_len != 0) {
                status = REFUSE;
                break;
            }
            Ptr p = bytes, end = bytes + data_len;
            o.mark = NULL;
            status = read_event(&p, end, &o);
            if (status == 0 && p != end) status = REFUSE;
            continue;
        }
        if (head_len == 0) {
            o.mark = NULL;
            status = read_chunk(bytes, bytes + data_len, &o);
            continue;
        }
        Ptr end = bytes + data_len;
        if (head == t_head) {
            /* The template's head: the rest of a text, then the template's bytes after it (its padding aside), make
             * an event read as the template was, its text aside (the same bytes up to the text leave the same
             * state, and the same bytes after it the same again). */
            Ptr p = bytes;
            Py_ssize_t before = o.text_len;
            if (t_lead > 0) {
                if (grow(&o, t_lead) < 0) goto done;
                memcpy(o.text + o.text_len, PyBytes_AS_STRING(head) + head_len - t_lead, (size_t)t_lead);
                o.text_len += t_lead;
            }
            Py_ssize_t n = read_text(&p, end, &o);
            if (n == FAIL) goto done;
            if (n == REFUSE) {
                status = REFUSE; /* the whole event's read comes to this same text */
                break;
            }
            int same;
            if (t_padded) {
                Ptr pad = p + t_stem_len;
                same = end - p >= t_stem_len + t_tail_len && memcmp(p, t_suffix, (size_t)t_stem_len) == 0;
                if (same) {
                    Py_ssize_t pad_len = plain_string(&pad, end);
                    same = pad_len >= 0 && end - pad == t_tail_len && memcmp(pad, t_tail, (size_t)t_tail_len) == 0;
                }
            } else {
                same = end - p == t_suffix_len && memcmp(p, t_suffix, (size_t)t_suffix_len) == 0;
            }
            n += t_lead;
            if (same) {
                o.events++;
                o.counted = n > 0;
                if (n > 0) {
                    PyObject *at = PyFloat_FromDouble(o.at);
                    if (at == NULL) goto done;
                    int failed = PyList_Append(o.times, at);
                    Py_DECREF(at);
                    if (failed) goto done;
                }
                continue;
            }
            o.text_len = before; /* read whole below */
        }
        Py_ssize_t total = head_len + data_len;
        if (total > joined_cap) {
            Py_ssize_t cap = joined_cap ? joined_cap : 4096;
            while (cap < total) cap *= 2;
            char *grown = PyMem_Realloc(joined, (size_t)cap);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            joined = grown;
            joined_cap = cap;
        }
        memcpy(joined, PyBytes_AS_STRING(head), (size_t)head_len);
        memcpy(joined + head_len, bytes, (size_t)data_len);
        Ptr start = (Ptr)joined;
        o.mark = start + head_len;
        Py_ssize_t events = o.events;
        status = read_chunk(start, start + total, &o);
        if (status == 0 && o.events == events + 1 && o.texts == 1 && o.text_end != NULL && o.extras == 0 &&
            plain_lead(start + head_len - o.lead, o.lead)) {
            /* One event whose one text holds the head's end (its bytes in the head plain), and no finish or usage:
             * the template of the entries with this head. Its bytes after the text are data's own (pointed into,
             * not copied). */
            t_head = head;
            t_lead = o.lead;
            t_suffix = bytes + (o.text_end - o.mark);
            t_suffix_len = end - t_suffix;
            t_padded = o.pad_start != NULL && o.pad_start >= o.text_end;
            if (t_padded) {
                t_stem_len = o.pad_start - o.text_end;
                t_tail = bytes + (o.pad_end + 1 - o.mark); /* after its closing quote */
                t_tail_len = end - t_tail;
            }
        }
    }
    if (status == FAIL) goto done;
    if (status == REFUSE || next_part != parts_count) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *text;
    if (o.text_len > 0) {
        text = PyUnicode_DecodeUTF8(o.text, o.text_len, "strict");
        if (text == NULL) goto done;
    } else {
        text = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("(NOOOOOn)", text, o.times, o.model ? o.model : Py_None, o.finish ? o.finish : Py_None,
                           o.usages ? o.usages : Py_None, o.counted ? Py_True : Py_False, o.events);
done:
    PyBuffer_Release(&view);
    PyMem_Free(joined);
    PyMem_Free(o.text);
    Py_XDECREF(o.times);
    Py_XDECREF(o.model);
    Py_XDECREF(o.finish);
    Py_XDECREF(o.usages);
    return result;
}

/* The relay's per-chunk scans (gateway.dialects.scans): what ``data.find(needle)`` and chat's
 * ``re.search(rb'"finish_reason"\s*:\s*"', data)`` answer, as one C call each. From compiled code a ``find``
 * is a method looked up by name and its arguments parsed from a tuple; these take their objects and search. */

static int bytes_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *name) {
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (!PyBytes_Check(args[i])) {
            PyErr_Format(PyExc_TypeError, "%s() takes bytes, not %.100s", name, Py_TYPE(args[i])->tp_name);
            return -1;
        }
    }
    return 0;
}

/* The first occurrence of needle (m bytes) in h (n bytes), or NULL. The needles here are a few bytes long and the
 * chunks a few hundred: with SSE2, 16 positions at a time are tested for the needle's first and last byte, and only
 * those that have both are compared whole (glibc's memmem sets up a shift table on every call, most of its cost on
 * such a chunk). */
static Ptr find_bytes(Ptr h, Py_ssize_t n, Ptr needle, Py_ssize_t m) {
    if (m == 0) return h;
    if (m > n) return NULL;
    if (m == 1) return memchr(h, needle[0], (size_t)n);
    Py_ssize_t i = 0;
#if defined(__SSE2__)
    const __m128i first = _mm_set1_epi8((char)needle[0]);
    const __m128i last = _mm_set1_epi8((char)needle[m - 1]);
    for (; i + m + 15 <= n; i += 16) {
        __m128i a = _mm_cmpeq_epi8(first, _mm_loadu_si128((const __m128i *)(h + i)));
        __m128i b = _mm_cmpeq_epi8(last, _mm_loadu_si128((const __m128i *)(h + i + m - 1)));
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_and_si128(a, b));
        while (mask) {
            Py_ssize_t at = i + __builtin_ctz(mask);
            if (memcmp(h + at + 1, needle + 1, (size_t)(m - 2)) == 0) return h + at;
            mask &= mask - 1;
        }
    }
#endif
    for (; i + m <= n; i++) {
        if (h[i] == needle[0] && h[i + m - 1] == needle[m - 1] && memcmp(h + i + 1, needle + 1, (size_t)(m - 2)) == 0)
            return h + i;
    }
    return NULL;
}

/* find(data, needle): ``data.find(needle)``, the offset of the first occurrence or -1 (an empty needle is at 0). */
static PyObject *find(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (bytes_args(args, nargs, 2, "find") < 0) return NULL;
    Ptr data = (Ptr)PyBytes_AS_STRING(args[0]);
    Ptr at = find_bytes(data, PyBytes_GET_SIZE(args[0]), (Ptr)PyBytes_AS_STRING(args[1]), PyBytes_GET_SIZE(args[1]));
    return PyLong_FromSsize_t(at == NULL ? -1 : at - data);
}

/* redact(secret, data): ``data`` with every ``secret`` replaced by ``***`` (``data.replace``), ``data`` itself when
 * it holds none or ``secret`` is empty: a provider's key, should the provider echo it back. */
static PyObject *redact(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (bytes_args(args, nargs, 2, "redact") < 0) return NULL;
    PyObject *secret = args[0], *data = args[1];
    Py_ssize_t length = PyBytes_GET_SIZE(secret);
    if (length == 0 || find_bytes((Ptr)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), (Ptr)PyBytes_AS_STRING(secret),
                                  length) == NULL)
        return Py_NewRef(data);
    return PyObject_CallMethod(data, "replace", "Oy", secret, "***");
}

/* What ``\s`` matches in a bytes pattern: space, \t, \n, \v, \f, \r. */
static inline int regex_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* chat_finish(data): whether ``"finish_reason"``, then spaces, a colon, spaces and a quote, occur in ``data``: each
 * occurrence of the key is tried in turn (``\s*`` cannot take the colon or the quote, so there is nothing to
 * backtrack into). */
static PyObject *chat_finish(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char key[] = "\"finish_reason\"";
    const Py_ssize_t key_len = (Py_ssize_t)sizeof(key) - 1;
    if (bytes_args(args, nargs, 1, "chat_finish") < 0) return NULL;
    Ptr p = (Ptr)PyBytes_AS_STRING(args[0]);
    Ptr end = p + PyBytes_GET_SIZE(args[0]);
    while (end - p >= key_len) {
        Ptr found = find_bytes(p, end - p, (Ptr)key, key_len);
        if (found == NULL) break;
        Ptr q = found + key_len;
        while (q < end && regex_space(*q)) q++;
        if (q < end && *q == ':') {
            q++;
            while (q < end && regex_space(*q)) q++;
            if (q < end && *q == '"') Py_RETURN_TRUE;
        }
        p = found + 1;
    }
    Py_RETURN_FALSE;
}

static PyMethodDef methods[] = {
    {"read_kept", (PyCFunction)(void (*)(void))read_kept, METH_FASTCALL,
     "read_kept(heads, datas, parts, times): what tally_chunks adds for these kept entries, or None."},
    {"find", (PyCFunction)(void (*)(void))find, METH_FASTCALL, "find(data, needle): data.find(needle)."},
    {"redact", (PyCFunction)(void (*)(void))redact, METH_FASTCALL,
     "redact(secret, data): data with every secret replaced by ***; data itself when it holds none."},
    {"chat_finish", (PyCFunction)(void (*)(void))chat_finish, METH_FASTCALL,
     "chat_finish(data): whether chat's finish_reason pattern occurs in data."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chat_read", NULL, -1, methods};

PyMODINIT_FUNC PyInit__chat_read(void) { return PyModule_Create(&module); }
