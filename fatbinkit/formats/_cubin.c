/* fatbinkit.formats._cubin: the per-function walk of a cubin in C (issue 32), optional.
 *
 * The same reading as fatbinkit/formats/cubin.py's pure-Python _Reader, for the cubins it
 * accepts: walk(data, mode, KernelParam, CubinFunction) returns what Cubin.from_bytes needs
 * (mode 0) or what cubin_outline needs (mode 1), or None where the pure reader must decide.
 * Every check the pure reader makes is made here too, and anything that does not check out,
 * or that this walk does not cover (extended section numbering, a section-name table that is
 * not ASCII, a name with a newline, a string table without its last NUL, ...), gives None:
 * the caller then runs the pure reader, which returns the same value or raises the precise
 * error. So this module never raises for bad input and never accepts what the pure reader
 * refuses; tests/test_cubin_fast.py holds both readers equal on every real cubin of the suite
 * and on fuzzed ones.
 *
 * Result, mode 0: (sm, virtual_sm or None, toolkit or None, [CubinFunction, ...],
 *                  {bank: size}, global_size, [(offset, bytes) of each .nv.compat])
 *         mode 1: (sm, virtual_sm or None, toolkit or None, [entry kernel name, ...],
 *                  {bank: size}, global_size, [(offset, bytes) of each .nv.compat])
 *   mode 1 gives None where the cubin records no toolkit (the pure outline parses in full).
 *         mode 2: as mode 0, each function as the row diff and gate compare (cubin.py's
 *                  cubin_profile): (name, entry, registers, stack, shared, local,
 *                  ((bank, size), ...), spill stores or None, spill loads or None, size)
 *
 * Also find(data, needle), a search of any buffer in place (below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* What the pure reader names in fatbinkit/formats/{elf,cubin,nvinfo}.py */
#define EM_CUDA 190
#define SHT_NOBITS 8
#define SHT_NULL 0
#define SHT_SYMTAB 2
#define SHT_NOTE 7
#define SHT_CUDA_INFO 0x70000000u
#define STT_FUNC 2
#define STO_CUDA_ENTRY 0x10
#define ABI_V1 7
#define ABI_V2 8
#define NO_TOOLKIT_BELOW 10
#define ANNOTATED_SINCE 126
#define FMT_NVAL 1
#define FMT_BVAL 2
#define FMT_HVAL 3
#define FMT_SVAL 4
#define EIATTR_MAX_THREADS 0x05
#define EIATTR_REQNTID 0x10
#define EIATTR_FRAME_SIZE 0x11
#define EIATTR_MIN_STACK_SIZE 0x12
#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define EIATTR_MAXREG_COUNT 0x1B
#define EIATTR_MAX_STACK_SIZE 0x23
#define EIATTR_REGCOUNT 0x2F
#define EIATTR_CUDA_API_VERSION 0x37
#define EIATTR_ANNOTATIONS 0x55
#define KPARAM_SIZE 12
#define NAME_SLACK (1u << 20)

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static int per_function_attribute(unsigned a) {
    return a == EIATTR_FRAME_SIZE || a == EIATTR_MIN_STACK_SIZE || a == EIATTR_MAX_STACK_SIZE ||
           a == 0x1E || a == EIATTR_REGCOUNT;
}
static int read_attribute(unsigned a) { /* cubin.py's _READ */
    return a == EIATTR_KPARAM_INFO || a == EIATTR_CBANK_PARAM_SIZE || a == EIATTR_MAXREG_COUNT ||
           a == EIATTR_CUDA_API_VERSION || a == EIATTR_MAX_THREADS || a == EIATTR_REQNTID ||
           a == EIATTR_ANNOTATIONS;
}

typedef struct {
    uint32_t name_at, type, link, info;
    uint64_t off, size;
    const char *name; /* in the section-name table, NUL-terminated */
    size_t nlen;
} Sec;

/* one name -> what sections of that name give it (cubin.py: shared, local, banks by name) */
typedef struct {
    const char *p;
    size_t n;
    uint64_t shared, local;
    int has_shared, has_local;
    PyObject *banks;       /* {bank: size} or NULL */
} Slot;

typedef struct {
    Slot *slots;
    size_t mask;
} Names;

typedef struct {
    uint32_t attr;
    uint64_t at;
    const uint8_t *p;
    uint32_t len;
    int64_t next;
} ModRec;

typedef struct {
    const uint8_t *d;
    size_t n;
    Sec *sec;
    size_t shnum;
    Names names;
    ModRec *recs;
    size_t nrec, caprec;
    int64_t *head, *tail; /* per symbol: first and last module record */
    size_t nsyms;
    int64_t *sym; /* per section: the function symbol of its .text (-1: none) */
    uint8_t *sym_other;
    int64_t *own; /* per section: the .nv.info.<f> section whose sh_info it is (-1: none) */
} Walk;

/* No byte of p[0:n] is 0x80 or above: eight at a time (a section-name table runs to 160 KiB,
 * and the byte-by-byte loop was half of the walk's time). */
static int ascii(const char *p, size_t n) {
    uint64_t all = 0, v;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&v, p + i, 8);
        all |= v;
    }
    for (; i < n; i++) all |= (uint8_t)p[i];
    return !(all & 0x8080808080808080ull);
}

static uint64_t hash(const char *p, size_t n) { /* eight bytes at a time: names run long */
    uint64_t h = 1469598103934665603ull ^ n, v;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    v = 0;
    memcpy(&v, p + i, n - i);
    h = (h ^ v) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
}

static Slot *slot(Names *t, const char *p, size_t n) {
    size_t i = (size_t)hash(p, n) & t->mask;
    for (;;) {
        Slot *s = &t->slots[i];
        if (s->p == NULL) {
            s->p = p;
            s->n = n;
            return s;
        }
        if (s->n == n && memcmp(s->p, p, n) == 0) return s;
        i = (i + 1) & t->mask;
    }
}

/* whether _Reader.body can read section s: SHT_NOBITS (empty) or inside the file; the table
 * checks the others but SHT_NULL */
static int readable(const Walk *w, const Sec *s) {
    return s->type == SHT_NOBITS || (s->off <= w->n && s->size <= w->n - s->off);
}

static int starts(const Sec *s, const char *prefix, size_t k) {
    return s->nlen >= k && memcmp(s->name, prefix, k) == 0;
}
static int named(const Sec *s, const char *name) {
    size_t k = strlen(name);
    return s->nlen == k && memcmp(s->name, name, k) == 0;
}

/* nvinfo.record_tuples' checks over a section's records: 0 when every record is whole */
static int records_ok(const uint8_t *b, size_t n) {
    size_t pos = 0;
    while (pos < n) {
        if (n - pos < 4) return -1;
        unsigned fmt = b[pos];
        size_t nxt = pos + 4;
        if (fmt == FMT_SVAL) {
            nxt += rd16(b + pos + 2);
            if (nxt > n) return -1;
        } else if (fmt != FMT_NVAL && fmt != FMT_BVAL && fmt != FMT_HVAL) {
            return -1;
        }
        pos = nxt;
    }
    return 0;
}

static int add_rec(Walk *w, uint32_t symbol, uint32_t attr, uint64_t at, const uint8_t *p,
                   uint32_t len) {
    if (symbol >= w->nsyms) return 0; /* no function's symbol: never looked up */
    if (w->nrec == w->caprec) {
        size_t cap = w->caprec ? w->caprec * 2 : 256;
        ModRec *r = PyMem_Realloc(w->recs, cap * sizeof(ModRec));
        if (r == NULL) return -1;
        w->recs = r;
        w->caprec = cap;
    }
    ModRec *r = &w->recs[w->nrec];
    r->attr = attr;
    r->at = at;
    r->p = p;
    r->len = len;
    r->next = -1;
    if (w->tail[symbol] >= 0)
        w->recs[w->tail[symbol]].next = (int64_t)w->nrec;
    else
        w->head[symbol] = (int64_t)w->nrec;
    w->tail[symbol] = (int64_t)w->nrec;
    w->nrec++;
    return 0;
}

/* a module-wide .nv.info (cubin.py's _module_records): -1 malformed, -2 no memory */
static int module_records(Walk *w, const Sec *s) {
    const uint8_t *b = w->d + s->off;
    size_t n = (size_t)s->size, pos = 0;
    if (records_ok(b, n)) return -1;
    while (pos < n) {
        unsigned fmt = b[pos], attr = b[pos + 1];
        size_t nxt = pos + 4;
        if (fmt == FMT_SVAL) {
            uint32_t len = rd16(b + pos + 2);
            nxt += len;
            if (per_function_attribute(attr) && len >= 4 &&
                add_rec(w, rd32(b + pos + 4), attr, s->off + pos, b + pos, 4 + len))
                return -2;
        }
        pos = nxt;
    }
    return 0;
}

/* (virtual SM, toolkit) of .note.nv.cuinfo / .cuver (cubin.py's _Reader.cuinfo): 1 found,
 * 0 none, -1 malformed; *toolkit -1 where the note has none */
static int cuinfo(const Walk *w, long long *vsm, long long *toolkit) {
    for (size_t i = 0; i < w->shnum; i++) {
        const Sec *s = &w->sec[i];
        int cu = named(s, ".note.nv.cuinfo");
        if (!(cu || named(s, ".note.nv.cuver")) || s->type != SHT_NOTE) continue;
        if (s->size < 12) return -1;
        const uint8_t *b = w->d + s->off;
        uint64_t desc = 12 + ((uint64_t)rd32(b) + 3) / 4 * 4;
        uint64_t size = rd32(b + 4) < 8 ? rd32(b + 4) : 8;
        if (size < 4 || desc + size > s->size) return -1;
        *vsm = rd16(b + desc + 2);
        *toolkit = -1;
        if (!cu || size < 6) return 1;
        *toolkit = size == 8 ? (long long)rd32(b + desc + 4) : (long long)rd16(b + desc + 4);
        return 1;
    }
    return 0;
}

/* the first word of .note.nv.tkinfo's descriptor: 1 found, 0 none, -1 malformed */
static int tkinfo(const Walk *w, long long *word) {
    for (size_t i = 0; i < w->shnum; i++) {
        const Sec *s = &w->sec[i];
        if (!named(s, ".note.nv.tkinfo") || s->type != SHT_NOTE) continue;
        if (s->size < 12) return -1;
        const uint8_t *b = w->d + s->off;
        uint64_t desc = 12 + ((uint64_t)rd32(b) + 3) / 4 * 4;
        if (desc + 4 > s->size) return -1;
        *word = (long long)rd32(b + desc);
        return 1;
    }
    return 0;
}

/* The ELF header and section table as elf._section_table checks them: 0 ok, -1 declined */
static int table(Walk *w, unsigned *abi, uint32_t *flags, uint32_t *version) {
    const uint8_t *d = w->d;
    size_t n = w->n;
    if (n < 64 || memcmp(d, "\x7f" "ELF", 4) || d[4] != 2 || d[5] != 1) return -1;
    if (rd16(d + 18) != EM_CUDA) return -1;
    *version = rd32(d + 20);
    *abi = d[8];
    *flags = rd32(d + 48);
    uint64_t phoff = rd64(d + 32), shoff = rd64(d + 40);
    uint64_t phsize = (uint64_t)rd16(d + 56) * rd16(d + 54);
    if (phoff > n || phsize > n - phoff) return -1;
    unsigned shentsize = rd16(d + 58), shnum = rd16(d + 60), shstrndx = rd16(d + 62);
    if (shoff == 0 || shentsize != 64 || shnum == 0 || shstrndx == 0 || shstrndx >= shnum)
        return -1; /* extended numbering, no name table, odd entries: the pure reader */
    if (shoff > n || (uint64_t)shnum * 64 > n - shoff) return -1;
    w->shnum = shnum;
    w->sec = PyMem_Calloc(shnum, sizeof(Sec));
    if (w->sec == NULL) return -1;
    for (size_t i = 0; i < shnum; i++) {
        const uint8_t *h = d + shoff + 64 * i;
        Sec *s = &w->sec[i];
        s->name_at = rd32(h);
        s->type = rd32(h + 4);
        s->off = rd64(h + 24);
        s->size = rd64(h + 32);
        s->link = rd32(h + 40);
        s->info = rd32(h + 44);
    }
    const Sec *strtab = &w->sec[shstrndx];
    if (strtab->off > n || strtab->size > n - strtab->off || strtab->size == 0) return -1;
    const char *names = (const char *)d + strtab->off;
    size_t nsize = (size_t)strtab->size;
    if (!ascii(names, nsize)) return -1; /* decoded by the pure reader */
    uint64_t inner = 0;
    for (size_t i = 0; i < shnum; i++) {
        Sec *s = &w->sec[i];
        size_t at = s->name_at;
        if (at >= nsize) return -1;
        const char *end = memchr(names + at, 0, nsize - at);
        if (end == NULL) return -1;
        if (at > 0 && names[at - 1] != 0) inner += (uint64_t)(end - (names + at));
        s->name = names + at;
        s->nlen = (size_t)(end - s->name);
        if (memchr(s->name, '\n', s->nlen)) return -1;
        if (s->type != SHT_NULL && s->type != SHT_NOBITS && (s->off > n || s->size > n - s->off))
            return -1;
    }
    if (inner > nsize + NAME_SLACK) return -1;
    return 0;
}

/* STT_FUNC symbols naming a .text section (cubin.py's _Reader.function_symbols): -1 declined */
static int symbols(Walk *w) {
    const Sec *st = NULL;
    for (size_t i = 0; i < w->shnum && st == NULL; i++)
        if (w->sec[i].type == SHT_SYMTAB) st = &w->sec[i];
    for (size_t i = 0; i < w->shnum; i++) w->sym[i] = -1;
    if (st == NULL) return 0;
    if (st->link == 0 || st->link >= w->shnum) return -1;
    const Sec *ss = &w->sec[st->link];
    if (ss->type == SHT_NOBITS || ss->size == 0 || !readable(w, ss)) return -1;
    const uint8_t *strings = w->d + ss->off;
    size_t slen = (size_t)ss->size;
    if (strings[slen - 1] != 0) return -1;
    size_t count = (size_t)(st->size / 24);
    const uint8_t *sym = w->d + st->off;
    w->nsyms = count;
    w->head = PyMem_Malloc((count ? count : 1) * sizeof(int64_t));
    w->tail = PyMem_Malloc((count ? count : 1) * sizeof(int64_t));
    if (w->head == NULL || w->tail == NULL) return -1;
    for (size_t k = 0; k < count; k++) {
        const uint8_t *e = sym + 24 * k;
        uint32_t name = rd32(e);
        w->head[k] = w->tail[k] = -1;
        if (name >= slen) return -1;
    }
    for (size_t k = 0; k < count; k++) {
        const uint8_t *e = sym + 24 * k;
        if ((e[4] & 0xF) != STT_FUNC) continue;
        unsigned shndx = rd16(e + 6);
        if (shndx >= w->shnum) continue;
        const Sec *t = &w->sec[shndx];
        if (!starts(t, ".text.", 6)) continue;
        const char *name = (const char *)strings + rd32(e);
        size_t len = strlen(name); /* the table ends with a NUL */
        if (len == t->nlen - 6 && memcmp(name, t->name + 6, len) == 0) {
            w->sym[shndx] = (int64_t)k;
            w->sym_other[shndx] = e[5];
        }
    }
    return 0;
}

static PyObject *KEY_F[22], *KEY_P[7], *DICT_KEY, *TEMPLATE_F, *TEMPLATE_P;
static const char *const FIELDS_F[22] = {
    "name", "entry", "registers", "stack", "shared", "local", "constant", "texture",
    "surface", "sampler", "params", "param_size", "frame_size", "max_stack", "max_threads",
    "reqntid", "maxreg", "cuda_api_version", "size", "spill_stores", "spill_loads",
    "raw_attributes"};
static const char *const FIELDS_P[7] = {"ordinal", "offset", "size", "log_alignment",
                                        "space", "cbank", "index"};

/* cls(**fields) without __init__, as cubin.py's _made: a new object given its __dict__ (a
 * copy of a dict holding every key, so that setting them does not grow it) */
static PyObject *made(PyObject *cls, PyObject *template, PyObject *const *keys,
                      PyObject **values, int n) {
    PyObject *fields = PyDict_Copy(template);
    if (fields == NULL) goto fail;
    for (int i = 0; i < n; i++) {
        if (values[i] == NULL || PyDict_SetItem(fields, keys[i], values[i])) goto fail;
        Py_CLEAR(values[i]);
    }
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL) goto fail;
    PyObject *obj = PyBaseObject_Type.tp_new((PyTypeObject *)cls, empty, NULL);
    Py_DECREF(empty);
    if (obj == NULL) goto fail;
    if (PyObject_GenericSetAttr(obj, DICT_KEY, fields)) {
        Py_DECREF(obj);
        goto fail;
    }
    Py_DECREF(fields);
    return obj;
fail:
    Py_XDECREF(fields);
    for (int i = 0; i < n; i++) Py_CLEAR(values[i]);
    return NULL;
}

static PyObject *u32(uint32_t v) { return PyLong_FromUnsignedLong(v); }

/* (file offset, bytes): one run of a function's raw attribute records */
static PyObject *run(uint64_t at, const uint8_t *p, uint64_t n) {
    PyObject *where = PyLong_FromUnsignedLongLong(at);
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)n);
    PyObject *item = where != NULL && bytes != NULL ? PyTuple_Pack(2, where, bytes) : NULL;
    Py_XDECREF(where);
    Py_XDECREF(bytes);
    return item;
}
static PyObject *none(void) { Py_RETURN_NONE; }

/* What a function's .nv.info.<f> gives it (cubin.py's _own_records) */
typedef struct {
    int have[0x100];              /* the first record of each read attribute: its index + 1 */
    const uint8_t *kp[4096];      /* KPARAM_INFO records, in order (more: declined) */
    size_t nkp;
    int notes_bad;                /* an ANNOTATIONS value that is not whole u32 pairs */
    const uint8_t *note[64];      /* ANNOTATIONS payloads (more: declined) */
    size_t note_len[64], nnote;
} Own;

typedef struct {
    unsigned fmt;
    const uint8_t *p;
    uint32_t len; /* SVAL payload; BVAL/HVAL value in len */
} Val;

/* -1 declined (a KPARAM that is not 12 bytes, too many of them) */
static int own_values(const uint8_t *b, size_t n, Own *o, Val *first) {
    memset(o->have, 0, sizeof o->have);
    o->nkp = o->nnote = 0;
    o->notes_bad = 0;
    size_t pos = 0;
    while (pos < n) {
        unsigned fmt = b[pos], attr = b[pos + 1];
        uint32_t half = rd16(b + pos + 2);
        size_t nxt = pos + 4 + (fmt == FMT_SVAL ? half : 0);
        if (read_attribute(attr)) {
            Val v = {fmt, b + pos + 4, fmt == FMT_BVAL ? (half & 0xFF) : half};
            if (attr == EIATTR_KPARAM_INFO) {
                if (fmt != FMT_SVAL || half != KPARAM_SIZE || o->nkp == 4096) return -1;
                o->kp[o->nkp++] = b + pos + 4;
            } else {
                if (attr == EIATTR_ANNOTATIONS) {
                    if (fmt != FMT_SVAL || half % 8) o->notes_bad = 1;
                    else if (o->nnote == 64) return -1;
                    else {
                        o->note[o->nnote] = b + pos + 4;
                        o->note_len[o->nnote++] = half;
                    }
                }
                if (!o->have[attr]) {
                    o->have[attr] = 1;
                    first[attr] = v;
                }
            }
        }
        pos = nxt;
    }
    return 0;
}

static const int WIDTHS[7] = {1, 1, 2, 2, 4, 8, 16};

static int spill_arch(long sm) {
    static const int a[] = {70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121};
    for (size_t i = 0; i < sizeof a / sizeof *a; i++)
        if (a[i] == sm) return 1;
    return 0;
}
static int spill_arch_64(long sm) {
    return sm == 50 || sm == 52 || sm == 53 || sm == 60 || sm == 61 || sm == 62;
}

/* cubin.py's _spills: 1 with the figures, 0 where an annotation does not check out */
static int spills(const Own *o, const uint8_t *text, uint64_t tlen, unsigned size,
                  long *stores, long *loads) {
    *stores = *loads = 0;
    if (o->notes_bad) return 0;
    int64_t end = (int64_t)tlen - (int64_t)size;
    for (size_t k = 0; k < o->nnote; k++) {
        for (size_t j = 0; j + 8 <= o->note_len[k]; j += 8) {
            uint32_t kind = rd32(o->note[k] + j), at = rd32(o->note[k] + j + 4);
            if (kind != 1 || at % size || (int64_t)at > end) return 0;
            unsigned code;
            int store, load;
            if (size == 8) {
                if (at % 32 == 0) return 0;
                uint64_t head = rd64(text + at) >> 48;
                code = head & 7;
                store = (head & 0xFFF8) == 0xEF50;
                load = (head & 0xFFF8) == 0xEF40;
            } else {
                uint64_t lo = rd64(text + at), hi = rd64(text + at + 8);
                code = (hi >> 9) & 7;
                store = (lo & 0xFFF) == 0x387 || (lo & 0xFFF) == 0x987;
                load = (lo & 0xFFF) == 0x983;
            }
            if (code >= 7 || !(store || load)) return 0;
            if (store)
                *stores += WIDTHS[code];
            else
                *loads += WIDTHS[code];
        }
    }
    return 1;
}

static int by_ordinal(const void *a, const void *b) {
    const uint8_t *x = *(const uint8_t *const *)a, *y = *(const uint8_t *const *)b;
    int d = (int)rd16(x + 4) - (int)rd16(y + 4);
    return d ? d : (x < y ? -1 : x > y); /* stable: equal ordinals in record order */
}

static PyObject *words(const Val *v) {
    if (v->fmt != FMT_SVAL || v->len < 4) return none();
    PyObject *t = PyTuple_New(v->len / 4);
    if (t == NULL) return NULL;
    for (uint32_t i = 0; i < v->len / 4; i++) {
        PyObject *x = u32(rd32(v->p + 4 * i));
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

static PyObject *int_value(const Own *o, const Val *first, unsigned attr) {
    if (!o->have[attr] || (first[attr].fmt != FMT_BVAL && first[attr].fmt != FMT_HVAL))
        return none();
    return u32(first[attr].len);
}

/* the CubinFunction of .text section i (cubin.py's _Reader.function) */
static PyObject *function(Walk *w, size_t i, unsigned annotated, PyObject *kcls, PyObject *fcls,
                          Own *o, Val *first, int mode) {
    const Sec *s = &w->sec[i];
    int64_t sym = w->sym[i];
    int entry = sym >= 0 && (w->sym_other[i] & STO_CUDA_ENTRY);
    PyObject *v[22] = {0};
    /* module records: raw runs, and the second u32 of each attribute's first one */
    uint32_t second[0x100];
    int has_second[0x100] = {0};
    Py_ssize_t nraw = 0;
    if (sym >= 0)
        for (int64_t r = w->head[sym]; r >= 0; r = w->recs[r].next) nraw++;
    int64_t ownsec = w->own[i];
    const Sec *os = ownsec >= 0 ? &w->sec[ownsec] : NULL;
    if (os != NULL && os->size > 0) nraw++;
    /* mode 2 (a row) keeps no raw records */
    PyObject *raw = PyTuple_New(mode == 2 ? 0 : nraw);
    if (raw == NULL) return NULL;
    Py_ssize_t k = 0;
    if (sym >= 0)
        for (int64_t r = w->head[sym]; r >= 0; r = w->recs[r].next) {
            const ModRec *m = &w->recs[r];
            if (mode != 2) {
                PyObject *item = run(m->at, m->p, m->len);
                if (item == NULL) goto fail_raw;
                PyTuple_SET_ITEM(raw, k++, item);
            }
            if (m->len >= 12 && !has_second[m->attr]) {
                has_second[m->attr] = 1;
                second[m->attr] = rd32(m->p + 8);
            }
        }
    if (os != NULL) {
        if (own_values(w->d + os->off, (size_t)os->size, o, first)) goto fail_decline;
        if (os->size > 0 && mode != 2) {
            PyObject *item = run(os->off, w->d + os->off, os->size);
            if (item == NULL) goto fail_raw;
            PyTuple_SET_ITEM(raw, k++, item);
        }
    } else {
        memset(o->have, 0, sizeof o->have);
        o->nkp = o->nnote = 0;
        o->notes_bad = 0;
    }
    uint32_t registers = entry && has_second[EIATTR_REGCOUNT] ? second[EIATTR_REGCOUNT]
                                                              : s->info >> 24;
    /* the function's name, shared, local and constant banks by name */
    Slot *by_name = slot(&w->names, s->name + 6, s->nlen - 6);
    long st = 0, ld = 0;
    int spilled = annotated ? 1 : -1; /* -1: None */
    if (annotated && (o->nnote || o->notes_bad)) {
        if (!readable(w, s)) goto fail_decline;
        const uint8_t *text = s->type == SHT_NOBITS ? w->d : w->d + s->off;
        uint64_t tlen = s->type == SHT_NOBITS ? 0 : s->size;
        spilled = spills(o, text, tlen, annotated, &st, &ld) ? 1 : -1;
    }
    if (mode == 2) { /* the row: diff's and gate's figures of the function (profile) */
        Py_DECREF(raw);
        PyObject *banks = by_name->banks != NULL ? PyDict_Items(by_name->banks) : PyList_New(0);
        PyObject *constant = banks != NULL ? PyList_AsTuple(banks) : NULL;
        Py_XDECREF(banks);
        if (constant == NULL) return NULL;
        return Py_BuildValue(
            "(NNNNNNNNNN)", PyUnicode_DecodeASCII(s->name + 6, (Py_ssize_t)(s->nlen - 6), NULL),
            PyBool_FromLong(entry), u32(registers),
            u32(has_second[EIATTR_MIN_STACK_SIZE] ? second[EIATTR_MIN_STACK_SIZE] : 0),
            PyLong_FromUnsignedLongLong(by_name->has_shared ? by_name->shared : 0),
            PyLong_FromUnsignedLongLong(by_name->has_local ? by_name->local : 0), constant,
            spilled > 0 ? PyLong_FromLong(st) : none(), spilled > 0 ? PyLong_FromLong(ld) : none(),
            PyLong_FromUnsignedLongLong(s->size));
    }
    /* params, by ordinal */
    PyObject *params = PyTuple_New((Py_ssize_t)o->nkp);
    if (params == NULL) goto fail_raw;
    if (o->nkp) {
        const uint8_t *order[4096];
        memcpy(order, o->kp, o->nkp * sizeof *order);
        qsort(order, o->nkp, sizeof *order, by_ordinal);
        for (size_t j = 0; j < o->nkp; j++) {
            const uint8_t *p = order[j];
            uint32_t wd = rd32(p + 8);
            PyObject *pv[7] = {u32(rd16(p + 4)), u32(rd16(p + 6)), u32((wd >> 18) & 0x3FFF),
                               u32(wd & 0xFF), u32((wd >> 8) & 0xF), u32((wd >> 12) & 0x1F),
                               u32(rd32(p))};
            PyObject *param = made(kcls, TEMPLATE_P, KEY_P, pv, 7);
            if (param == NULL) {
                Py_DECREF(params);
                goto fail_raw;
            }
            PyTuple_SET_ITEM(params, (Py_ssize_t)j, param);
        }
    }
    const Val *api = o->have[EIATTR_CUDA_API_VERSION] ? &first[EIATTR_CUDA_API_VERSION] : NULL;
    v[0] = PyUnicode_DecodeASCII(s->name + 6, (Py_ssize_t)(s->nlen - 6), NULL);
    v[1] = PyBool_FromLong(entry);
    v[2] = u32(registers);
    v[3] = u32(has_second[EIATTR_MIN_STACK_SIZE] ? second[EIATTR_MIN_STACK_SIZE] : 0);
    v[4] = PyLong_FromUnsignedLongLong(by_name->has_shared ? by_name->shared : 0);
    v[5] = PyLong_FromUnsignedLongLong(by_name->has_local ? by_name->local : 0);
    if (by_name->banks != NULL) {
        Py_INCREF(by_name->banks);
        v[6] = by_name->banks;
    } else {
        v[6] = PyDict_New();
    }
    v[7] = PyLong_FromLong(0);
    v[8] = PyLong_FromLong(0);
    v[9] = PyLong_FromLong(0);
    v[10] = params;
    v[11] = int_value(o, first, EIATTR_CBANK_PARAM_SIZE);
    v[12] = has_second[EIATTR_FRAME_SIZE] ? u32(second[EIATTR_FRAME_SIZE]) : none();
    v[13] = has_second[EIATTR_MAX_STACK_SIZE] ? u32(second[EIATTR_MAX_STACK_SIZE]) : none();
    v[14] = o->have[EIATTR_MAX_THREADS] ? words(&first[EIATTR_MAX_THREADS]) : none();
    v[15] = o->have[EIATTR_REQNTID] ? words(&first[EIATTR_REQNTID]) : none();
    v[16] = int_value(o, first, EIATTR_MAXREG_COUNT);
    v[17] = api != NULL && api->fmt == FMT_SVAL && api->len >= 4 ? u32(rd32(api->p)) : none();
    v[18] = PyLong_FromUnsignedLongLong(s->size);
    v[19] = spilled > 0 ? PyLong_FromLong(st) : none();
    v[20] = spilled > 0 ? PyLong_FromLong(ld) : none();
    v[21] = raw;
    return made(fcls, TEMPLATE_F, KEY_F, v, 22);
fail_decline:
    Py_DECREF(raw);
    return Py_NewRef(Py_Ellipsis); /* the pure reader decides */
fail_raw:
    Py_DECREF(raw);
    return NULL;
}

/* the first non-zero EIATTR_CUDA_API_VERSION of the functions, in order (the toolkit's last
 * resort, cubin.py's _Reader.cubin); 0 where none */
static long long api_version(Walk *w, Own *o, Val *first) {
    for (size_t i = 0; i < w->shnum; i++) {
        const Sec *s = &w->sec[i];
        if (!starts(s, ".text.", 6) || w->own[i] < 0) continue;
        const Sec *os = &w->sec[w->own[i]];
        if (own_values(w->d + os->off, (size_t)os->size, o, first)) return -1;
        if (o->have[EIATTR_CUDA_API_VERSION]) {
            const Val *api = &first[EIATTR_CUDA_API_VERSION];
            if (api->fmt == FMT_SVAL && api->len >= 4 && rd32(api->p))
                return (long long)rd32(api->p);
        }
    }
    return 0;
}

static void release(Walk *w) {
    if (w->names.slots != NULL)
        for (size_t i = 0; i <= w->names.mask; i++) Py_XDECREF(w->names.slots[i].banks);
    PyMem_Free(w->names.slots);
    PyMem_Free(w->sec);
    PyMem_Free(w->recs);
    PyMem_Free(w->head);
    PyMem_Free(w->tail);
    PyMem_Free(w->sym);
    PyMem_Free(w->sym_other);
    PyMem_Free(w->own);
}

/* ".nv.constant<digits>[.<name>]": the bank, and the name's start (NULL: module-wide);
 * -1 where the name is not one (cubin.py's _CONST_RE) */
static long bank_of(const Sec *s, const char **name, size_t *nlen) {
    const char *p = s->name + 12, *end = s->name + s->nlen;
    long bank = 0;
    int digits = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (++digits > 9) return -2; /* the pure reader */
        bank = bank * 10 + (*p++ - '0');
    }
    if (!digits) return -1;
    if (p == end) {
        *name = NULL;
        return bank;
    }
    if (*p != '.') return -1;
    *name = p + 1;
    *nlen = (size_t)(end - p - 1);
    return bank;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf;
    int mode;
    PyObject *kcls, *fcls;
    if (!PyArg_ParseTuple(args, "y*iOO", &buf, &mode, &kcls, &fcls)) return NULL;
    Walk w;
    memset(&w, 0, sizeof w);
    w.d = buf.buf;
    w.n = (size_t)buf.len;
    PyObject *out = NULL, *functions = NULL, *module_banks = NULL, *compat = NULL;
    Own *o = NULL;
    Val *first = NULL;
    unsigned abi;
    uint32_t flags, version;
    int declined = 1;
    if (table(&w, &abi, &flags, &version)) goto done;
    long sm;
    if (abi == ABI_V1)
        sm = flags & 0xFF;
    else if (abi == ABI_V2)
        sm = (flags >> 8) & 0xFF;
    else
        goto done;
    if (sm < 10) goto done;
    w.sym = PyMem_Malloc(w.shnum * sizeof(int64_t));
    w.sym_other = PyMem_Calloc(w.shnum, 1);
    w.own = PyMem_Malloc(w.shnum * sizeof(int64_t));
    size_t cap = 1;
    while (cap < 2 * w.shnum + 2) cap <<= 1;
    w.names.slots = PyMem_Calloc(cap, sizeof(Slot));
    w.names.mask = cap - 1;
    o = PyMem_Malloc(sizeof(Own));
    first = PyMem_Malloc(0x100 * sizeof(Val));
    if (!w.sym || !w.sym_other || !w.own || !w.names.slots || !o || !first) {
        PyErr_NoMemory();
        declined = 0;
        goto done;
    }
    /* the toolkit, as cuobjdump reads it (cubin.py's _NO_TOOLKIT_BELOW) */
    long long vsm = -1, tk = -1, note_tk = -1, word;
    int got = cuinfo(&w, &vsm, &note_tk);
    if (got < 0) goto done;
    if (abi == ABI_V1 && version >= NO_TOOLKIT_BELOW)
        tk = (long long)version;
    else if (note_tk >= 0)
        tk = note_tk;
    else {
        int t = tkinfo(&w, &word);
        if (t < 0) goto done;
        if (t && word >= NO_TOOLKIT_BELOW) tk = word;
    }
    if (mode == 1 && tk < 0) goto done;
    if (symbols(&w)) goto done;
    /* one pass over the sections */
    module_banks = PyDict_New();
    compat = PyList_New(0);
    if (module_banks == NULL || compat == NULL) {
        declined = 0;
        goto done;
    }
    uint64_t global_size = 0;
    for (size_t i = 0; i < w.shnum; i++) w.own[i] = -1;
    for (size_t i = 0; i < w.shnum; i++) {
        const Sec *s = &w.sec[i];
        if (mode == 1 && (starts(s, ".text.", 6) || starts(s, ".nv.shared.", 11) ||
                          starts(s, ".nv.local.", 10))) {
            /* the outline reads no function's own sections */
        } else if (starts(s, ".text.", 6)) {
            slot(&w.names, s->name + 6, s->nlen - 6);
        } else if (starts(s, ".nv.shared.", 11)) {
            Slot *t = slot(&w.names, s->name + 11, s->nlen - 11);
            t->shared = s->size;
            t->has_shared = 1;
        } else if (starts(s, ".nv.local.", 10)) {
            Slot *t = slot(&w.names, s->name + 10, s->nlen - 10);
            t->local = s->size;
            t->has_local = 1;
        } else if (starts(s, ".nv.constant", 12)) {
            const char *name = NULL;
            size_t nlen = 0;
            long bank = bank_of(s, &name, &nlen);
            if (bank == -2) goto done;
            if (bank >= 0 && (mode != 1 || name == NULL)) { /* the outline: module banks */
                PyObject *key = PyLong_FromLong(bank), *size = PyLong_FromUnsignedLongLong(s->size);
                PyObject *into = module_banks;
                if (name != NULL) {
                    Slot *t = slot(&w.names, name, nlen);
                    if (t->banks == NULL) t->banks = PyDict_New();
                    into = t->banks;
                }
                int bad = key == NULL || size == NULL || into == NULL ||
                          PyDict_SetItem(into, key, size);
                Py_XDECREF(key);
                Py_XDECREF(size);
                if (bad) {
                    declined = 0;
                    goto done;
                }
            }
        } else if (named(s, ".nv.global") || named(s, ".nv.global.init")) {
            if (s->size > UINT64_MAX - global_size) goto done; /* the pure reader */
            global_size += s->size;
        }
        if (named(s, ".nv.compat")) {
            if (!readable(&w, s)) goto done;
            PyObject *item = s->type == SHT_NOBITS
                                 ? Py_BuildValue("(Ky#)", (unsigned long long)s->off, "", 0)
                                 : Py_BuildValue("(Ky#)", (unsigned long long)s->off,
                                                 w.d + s->off, (Py_ssize_t)s->size);
            if (item == NULL || PyList_Append(compat, item)) {
                Py_XDECREF(item);
                declined = 0;
                goto done;
            }
            Py_DECREF(item);
        }
        if (s->type != SHT_CUDA_INFO || mode == 1) continue;
        if (named(s, ".nv.info")) {
            int r = module_records(&w, s);
            if (r == -2) {
                PyErr_NoMemory();
                declined = 0;
                goto done;
            }
            if (r) goto done;
        } else {
            if (records_ok(w.d + s->off, (size_t)s->size)) goto done;
            if (starts(s, ".nv.info.", 9) && s->info < w.shnum) w.own[s->info] = (int64_t)i;
        }
    }
    functions = PyList_New(0);
    if (functions == NULL) {
        declined = 0;
        goto done;
    }
    if (mode == 1) {
        for (size_t i = 0; i < w.shnum; i++) {
            const Sec *s = &w.sec[i];
            if (!starts(s, ".text.", 6) || w.sym[i] < 0 || !(w.sym_other[i] & STO_CUDA_ENTRY))
                continue;
            PyObject *name = PyUnicode_DecodeASCII(s->name + 6, (Py_ssize_t)(s->nlen - 6), NULL);
            if (name == NULL || PyList_Append(functions, name)) {
                Py_XDECREF(name);
                declined = 0;
                goto done;
            }
            Py_DECREF(name);
        }
    } else {
        if (tk < 0) {
            long long api = api_version(&w, o, first);
            if (api < 0) goto done;
            if (api > 0) tk = api;
        }
        unsigned annotated = tk < ANNOTATED_SINCE ? 0 : spill_arch(sm) ? 16
                                                       : spill_arch_64(sm) ? 8 : 0;
        for (size_t i = 0; i < w.shnum; i++) {
            if (!starts(&w.sec[i], ".text.", 6)) continue;
            PyObject *f = function(&w, i, annotated, kcls, fcls, o, first, mode);
            if (f == Py_Ellipsis) {
                Py_DECREF(f);
                goto done;
            }
            if (f == NULL || PyList_Append(functions, f)) {
                Py_XDECREF(f);
                declined = 0;
                goto done;
            }
            Py_DECREF(f);
        }
    }
    out = Py_BuildValue("(lNNOOKO)", sm, vsm >= 0 ? PyLong_FromLongLong(vsm) : none(),
                        tk >= 0 ? PyLong_FromLongLong(tk) : none(), functions, module_banks,
                        (unsigned long long)global_size, compat);
    declined = 0;
done:
    release(&w);
    PyMem_Free(o);
    PyMem_Free(first);
    Py_XDECREF(functions);
    Py_XDECREF(module_banks);
    Py_XDECREF(compat);
    PyBuffer_Release(&buf);
    if (declined) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return out;
}

/* find(data, needle): the first position of needle in data, or -1 (bytes.find over any
 * buffer, without copying it: formats/reader.py's Reader.holds searches a mapped string table
 * of 72 MB in place). memmem where the C library has it (glibc: a two-way search, several
 * GB/s), else memchr on the needle's first byte and memcmp. The GIL is released meanwhile. */
static PyObject *find(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer hay, needle;
    if (!PyArg_ParseTuple(args, "y*y*", &hay, &needle)) return NULL;
    Py_ssize_t at = -1;
    const char *h = hay.buf, *n = needle.buf;
    size_t hn = (size_t)hay.len, nn = (size_t)needle.len;
    if (nn == 0)
        at = 0;
    else if (nn <= hn) {
        const char *p = NULL;
        Py_BEGIN_ALLOW_THREADS
#if defined(__GLIBC__) || defined(__APPLE__) || defined(__FreeBSD__)
        p = memmem(h, hn, n, nn);
#else
        const char *end = h + (hn - nn) + 1, *q = h;
        while (q < end && (q = memchr(q, n[0], (size_t)(end - q))) != NULL) {
            if (memcmp(q, n, nn) == 0) {
                p = q;
                break;
            }
            q++;
        }
#endif
        Py_END_ALLOW_THREADS
        if (p != NULL) at = (Py_ssize_t)(p - h);
    }
    PyBuffer_Release(&hay);
    PyBuffer_Release(&needle);
    return PyLong_FromSsize_t(at);
}

static PyMethodDef METHODS[] = {
    {"walk", walk, METH_VARARGS,
     "walk(data, mode, KernelParam, CubinFunction): a cubin's functions (mode 0), outline "
     "(mode 1) or function rows (mode 2), or None where the pure reader decides."},
    {"find", find, METH_VARARGS,
     "find(data, needle): the first position of needle in the buffer data, or -1."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_cubin",
                                    "The per-function walk of a cubin in C, and a search of "
                                    "a buffer in place (optional).", -1,
                                    METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__cubin(void) {
    for (int i = 0; i < 22; i++)
        if ((KEY_F[i] = PyUnicode_InternFromString(FIELDS_F[i])) == NULL) return NULL;
    for (int i = 0; i < 7; i++)
        if ((KEY_P[i] = PyUnicode_InternFromString(FIELDS_P[i])) == NULL) return NULL;
    if ((DICT_KEY = PyUnicode_InternFromString("__dict__")) == NULL) return NULL;
    if ((TEMPLATE_F = PyDict_New()) == NULL || (TEMPLATE_P = PyDict_New()) == NULL) return NULL;
    for (int i = 0; i < 22; i++)
        if (PyDict_SetItem(TEMPLATE_F, KEY_F[i], Py_None)) return NULL;
    for (int i = 0; i < 7; i++)
        if (PyDict_SetItem(TEMPLATE_P, KEY_P[i], Py_None)) return NULL;
    return PyModule_Create(&MODULE);
}
