/* The stream object the stand-in libcuda hands out as a CUstream, shared with the stand-in
 * libnccl: NCCL takes a cudaStream_t (the same handle) and runs its work on it, so that
 * cuStreamSynchronize and cuStreamQuery wait for NCCL's work as they wait for a kernel's.
 *
 * Work on a stream is one host thread at a time: whoever starts work joins the stream's
 * previous thread first (stream order), stores the new thread, sets `running` and clears
 * `done`; the thread sets `done` (release) when it ends; libcuda joins it on synchronize. */
#ifndef GDRDOCTOR_STREAM_STUB_H
#define GDRDOCTOR_STREAM_STUB_H

#include <pthread.h>

struct stub_stream {
	pthread_t thread;
	int running;
	int done; /* atomic */
	int error; /* a CUresult, reported once at the next synchronisation */
};

#endif
