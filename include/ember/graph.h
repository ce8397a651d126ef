/*
 * graph.h — captured graphs: record a program once on the `capture` device, save it to one
 * file, look at it, and replay it on any device.
 *
 * Recording. em_graph_begin opens a capture. Tensors on the `capture` device (and on
 * `capture+autodiff`) hold a dtype, a shape and a place in the graph, never values: every op
 * on them checks its arguments and computes its shape as on any device (same statuses, same
 * messages) and appends the kernel calls it makes to the graph. Reading values off them
 * (em_tensor_to_data, em_tensor_item, em_to_device to another device) is EM_ERR_STATE.
 *
 * A graph has two parts:
 *   - the setup: what is recorded before the first em_graph_input — parameters created from
 *     data (em_tensor_from_data on the capture device, em_to_device onto it), optimizer
 *     state, constants. It runs once, when the graph is prepared on a device, and the buffers
 *     it makes that are still alive when the capture ends are the graph's *state*: they keep
 *     their values from one run to the next (parameters updated by a captured optimizer step
 *     stay updated, as when the step runs eagerly). em_graph_name names a state tensor so that
 *     em_exec_state can read it back.
 *   - the step: what is recorded from the first em_graph_input to em_graph_end. It runs at
 *     every em_exec_run, reading the inputs given there and producing the outputs declared
 *     with em_graph_output.
 * Random ops record their seed: each run draws the same numbers. Index values (gather,
 * embedding, cross_entropy targets) are range-checked when the graph runs, not when it is
 * recorded. On `capture+autodiff`, em_backward records the backward pass too, and
 * em_optimizer_step the optimizer's step (SGD, Adam, AdamW), so a whole training step is one
 * graph. Adam's bias correction changes with the step count: a captured Adam / AdamW step is
 * one graph-only call that reads each parameter's step count from a tensor of the graph (the
 * optimizer's "<name>.step", made in the setup with the optimizer) at every run and advances
 * it, so N runs take N successive steps with the bits of N eager steps on the replay device.
 * Make the optimizer (and load its state) before the first em_graph_input: its moments and
 * counts are then state.
 *
 * The kernels recorded are the backend table's basic slots (include/ember/backend.h); ops
 * that a device may fuse (attention, SGD's step, unary ops' gradients) are recorded composed
 * from them, so a replay on a device with fused kernels for them matches its eager run within
 * the conformance table's tolerances, and every other op bit for bit; batch, group and RMS
 * norm are recorded as the fused call and its composition, each device running the form its
 * eager run takes.
 *
 * Ownership: an em_graph is owned by its creator (em_graph_begin, em_graph_load) and released
 * with em_graph_release; an em_exec holds a reference to its graph, so the graph may be
 * released before the exec. Tensors returned are new references.
 */
#ifndef EMBER_GRAPH_H
#define EMBER_GRAPH_H

#include <stdio.h>

#include "ember.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The version of the graph file format this library writes (docs/graph-format.md). */
#define EM_GRAPH_FORMAT_VERSION 1

typedef struct em_graph em_graph;
typedef struct em_exec em_exec;

/* ---- recording ---- */

/** Opens a capture: until em_graph_end, kernels of tensors on the `capture` device are
 *  appended to *out. One capture is open at a time in a process. Errors: EM_ERR_STATE
 *  (another capture is open), EM_ERR_NOMEM. */
em_status em_graph_begin(em_graph **out);
/** Declares a named input of the step: *out is a new tensor of dtype dt and shape on dev
 *  (`capture` or `capture+autodiff[:balanced]`, as em_device_parse makes them) whose values
 *  em_exec_run takes from its inputs[i], in declaration order. The first input ends the
 *  setup (see above). Names are 1..127 bytes of [A-Za-z0-9_.:/-], unique among inputs.
 *  Errors: EM_ERR_ARG (name, NULL), EM_ERR_SHAPE, EM_ERR_DTYPE (quantized), EM_ERR_DEVICE
 *  (not a capture device), EM_ERR_STATE (the capture is not open). */
em_status em_graph_input(em_graph *g, const char *name, em_dtype dt, const int64_t *shape,
                         int rank, em_device dev, em_tensor **out);
/** Declares t (a capture tensor of this graph, any view) the named output number
 *  em_graph_output_count - 1: em_exec_run returns its values. Names as for inputs, unique
 *  among outputs. Errors: EM_ERR_ARG, EM_ERR_DEVICE (not on the capture device),
 *  EM_ERR_STATE (closed capture, or t was recorded in another graph). */
em_status em_graph_output(em_graph *g, const char *name, const em_tensor *t);
/** Names the state that t holds (a tensor made in the setup, e.g. a parameter), so that
 *  em_exec_state(exec, name) reads its current value. Errors: as em_graph_output, and
 *  EM_ERR_ARG when t was made in the step (it is no state). */
em_status em_graph_name(em_graph *g, const char *name, const em_tensor *t);
/** Closes the capture. Capture tensors still alive stay valid handles but any further op
 *  on them is EM_ERR_STATE. Errors: EM_ERR_STATE (not open), or the first failure that
 *  happened while recording (out of memory). */
em_status em_graph_end(em_graph *g);
/** Releases a graph (closing its capture if open). NULL is a no-op. */
void em_graph_release(em_graph *g);

/* ---- looking at it ---- */

/** The number of inputs / outputs / named state tensors, and the recorded kernel calls. */
int em_graph_input_count(const em_graph *g);
int em_graph_output_count(const em_graph *g);
int em_graph_state_count(const em_graph *g);
int64_t em_graph_kernel_count(const em_graph *g);
/** The name, dtype and shape of input / output / state i (NULL out-parameters are skipped;
 *  shape has room for EM_MAX_RANK dims). The name stays valid while the graph lives.
 *  Errors: EM_ERR_ARG (NULL graph, i out of range). */
em_status em_graph_input_info(const em_graph *g, int i, const char **name, em_dtype *dt,
                              int64_t *shape, int *rank);
em_status em_graph_output_info(const em_graph *g, int i, const char **name, em_dtype *dt,
                               int64_t *shape, int *rank);
em_status em_graph_state_info(const em_graph *g, int i, const char **name, em_dtype *dt,
                              int64_t *shape, int *rank);

/** Counts over a graph (ember-graph --summary). */
typedef struct em_graph_stats {
    int64_t kernels;          /* kernel calls: setup + step */
    int64_t setup_kernels;    /* of which in the setup */
    int64_t buffers;          /* buffers the graph makes */
    int64_t state_bytes;      /* bytes of the setup's buffers alive at the end (parameters,
                               * optimizer state): what the file's initial values cover */
    int64_t init_bytes;       /* bytes of data written from the host (initial values) */
    int64_t peak_bytes;       /* most bytes alive at once while the step runs */
    int64_t flops;            /* floating-point operations of one step (multiply-adds
                               * count 2), approximate for transcendental functions */
} em_graph_stats;

/** Fills *out. Errors: EM_ERR_ARG (NULL). */
em_status em_graph_stats_of(const em_graph *g, em_graph_stats *out);
/** Writes a readable summary: inputs, outputs, state, kernel calls and FLOPs per op family,
 *  bytes. Errors: EM_ERR_ARG, EM_ERR_IO. */
em_status em_graph_write_summary(const em_graph *g, FILE *f);
/** Writes the step as a Graphviz digraph (dot language) to path: one node per kernel call
 *  (op, dtype, shape), inputs, state and outputs, edges from each call to the calls that
 *  read what it wrote. Errors: EM_ERR_ARG, EM_ERR_IO. */
em_status em_graph_write_dot(const em_graph *g, const char *path);

/* ---- saving and loading ---- */

/** Saves the graph (a closed capture or a loaded graph) and its initial values to one
 *  safetensors file: the initial values are the file's tensors, the graph is JSON in its
 *  `__metadata__` under "ember.graph" (docs/graph-format.md). Errors: EM_ERR_ARG,
 *  EM_ERR_STATE (the capture is still open), EM_ERR_IO. */
em_status em_graph_save(const em_graph *g, const char *path);
/** Loads a graph saved by em_graph_save. Everything in the file is checked; a damaged or
 *  hostile file is EM_ERR_IO with the reason (a graph of a newer format version names the
 *  version), never a crash. */
em_status em_graph_load(const char *path, em_graph **out);
/** em_graph_load from bytes in memory (len bytes at data, not kept). */
em_status em_graph_load_buffer(const void *data, size_t len, em_graph **out);

/* ---- replay ---- */

/** Prepares g on dev (any device: ref, cpu, opencl:N, remote:N, any of them +autodiff):
 *  allocates its state there and runs the setup once. *out is the exec, whose runs then
 *  cost the kernels and little else. Errors: EM_ERR_DEVICE, EM_ERR_STATE (g still
 *  recording), EM_ERR_NOMEM, and any failure of the setup's kernels. */
em_status em_graph_prepare(const em_graph *g, em_device dev, em_exec **out);
/** Runs the step once: inputs[i] (n_inputs == em_graph_input_count, each on the exec's
 *  device with the input's dtype and shape, any layout) in; outputs[i] (n_outputs ==
 *  em_graph_output_count, or 0 with outputs NULL) get new tensors on the exec's device.
 *  The state carries over to the next run. An input that the captured step wrote into (a
 *  module's buffer updated in place, as batch norm's running statistics) is written, as
 *  running the step eagerly would write it. Errors: EM_ERR_ARG (counts, NULL), EM_ERR_SHAPE /
 *  EM_ERR_DTYPE / EM_ERR_DEVICE naming the input, EM_ERR_ARG for an index out of range, and
 *  any kernel's failure; after a failure the state may be partly updated. */
em_status em_exec_run(em_exec *e, const em_tensor *const *inputs, int n_inputs,
                      em_tensor **outputs, int n_outputs);
/** The current value of named state `name` as a new tensor on the exec's device (a copy).
 *  Errors: EM_ERR_ARG (unknown name). */
em_status em_exec_state(em_exec *e, const char *name, em_tensor **out);
/** Releases an exec and its device memory. NULL is a no-op. */
void em_exec_release(em_exec *e);
/** em_graph_prepare, one em_exec_run, em_exec_release: a one-shot replay from the graph's
 *  initial state. */
em_status em_graph_run(const em_graph *g, em_device dev, const em_tensor *const *inputs,
                       int n_inputs, em_tensor **outputs, int n_outputs);

#ifdef __cplusplus
}
#endif
#endif /* EMBER_GRAPH_H */
