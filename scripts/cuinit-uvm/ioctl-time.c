/* LD_PRELOAD shim: every ioctl and open of the process with its duration, one line each, to
 * $IOCTL_LOG (scripts/cuinit-uvm.sh, issue 16). For an RM control (nr 0x2a) x is its command,
 * for an RM alloc (nr 0x2b) the class. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
static FILE*lg; static double t00;
static void init(void){ if(lg) return; const char*p=getenv("IOCTL_LOG"); lg=fopen(p?p:"/tmp/ioctl.log","a"); t00=now(); setvbuf(lg,NULL,_IOFBF,1<<20);}
__attribute__((destructor)) static void fin(void){ if(lg) fflush(lg);}
static void path(int fd,char*b,size_t n){char l[64];snprintf(l,64,"/proc/self/fd/%d",fd);ssize_t r=readlink(l,b,n-1);b[r>0?r:0]=0;}
int ioctl(int fd, unsigned long req, ...){
  static int(*real)(int,unsigned long,...); if(!real) real=dlsym(RTLD_NEXT,"ioctl");
  va_list ap; va_start(ap,req); void*arg=va_arg(ap,void*); va_end(ap);
  init(); double t0=now(); int r=real(fd,req,arg); double t1=now();
  char p[128]; path(fd,p,sizeof p);
  unsigned nr=req&0xff; unsigned x=0;
  if(arg && strncmp(p,"/dev/nvidia",11)==0 && strcmp(p,"/dev/nvidia-uvm")!=0 && ((req>>8)&0xff)=='F'){
    if(nr==0x2a) x=((uint32_t*)arg)[2]; else if(nr==0x2b) x=((uint32_t*)arg)[3];
  }
  fprintf(lg,"%d %.3f %.3f ioctl %s req=0x%lx nr=0x%x x=0x%x r=%d\n",getpid(),t0-t00,t1-t0,p,req,nr,x,r);
  return r;
}
int open64(const char*f,int fl,...){ static int(*real)(const char*,int,...); if(!real) real=dlsym(RTLD_NEXT,"open64");
  va_list ap; va_start(ap,fl); int m=va_arg(ap,int); va_end(ap); init(); double t0=now(); int r=real(f,fl,m); double t1=now();
  fprintf(lg,"%d %.3f %.3f open %s r=%d\n",getpid(),t0-t00,t1-t0,f,r); return r;}
int open(const char*f,int fl,...){ static int(*real)(const char*,int,...); if(!real) real=dlsym(RTLD_NEXT,"open");
  va_list ap; va_start(ap,fl); int m=va_arg(ap,int); va_end(ap); init(); double t0=now(); int r=real(f,fl,m); double t1=now();
  fprintf(lg,"%d %.3f %.3f open %s r=%d\n",getpid(),t0-t00,t1-t0,f,r); return r;}
int openat(int d,const char*f,int fl,...){ static int(*real)(int,const char*,int,...); if(!real) real=dlsym(RTLD_NEXT,"openat");
  va_list ap; va_start(ap,fl); int m=va_arg(ap,int); va_end(ap); init(); double t0=now(); int r=real(d,f,fl,m); double t1=now();
  fprintf(lg,"%d %.3f %.3f openat %s r=%d\n",getpid(),t0-t00,t1-t0,f,r); return r;}
