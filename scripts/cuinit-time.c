/* Time dlopen("libcuda.so.1") and cuInit(0) alone, to compare with the `[live-cuda] cuda.init
 * phase of `GDRDOCTOR_TRACE=1 gdrdoctor check` (issue 16). gcc -O2 -o cuinit-time scripts/cuinit-time.c -ldl */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
int main(void){
  double t0=now();
  void*h=dlopen("libcuda.so.1",RTLD_NOW|RTLD_LOCAL);
  double t1=now();
  if(!h){printf("dlopen failed\n");return 1;}
  int(*init)(unsigned)=(int(*)(unsigned))dlsym(h,"cuInit");
  int(*count)(int*)=(int(*)(int*))dlsym(h,"cuDeviceGetCount");
  int r=init(0); double t2=now(); int n=0; count(&n); double t3=now();
  printf("dlopen %.1f cuInit %.1f (rc %d) count %.2f n=%d\n",t1-t0,t2-t1,r,t3-t2,n);
  return 0;
}
