/* LD_PRELOAD: open("/dev/nvidia-uvm") fails with NOUVM_ERRNO (default ENOENT); or, with
 * NOUVM_IOCTL=<errno>, only the UVM_REGISTER_GPU ioctl (0x25) fails with that errno. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
static int mode_ioctl(void){return getenv("NOUVM_IOCTL")!=NULL;}
static int blocked(const char*f){return !mode_ioctl()&&f&&strcmp(f,"/dev/nvidia-uvm")==0;}
static int err(void){const char*e=getenv("NOUVM_ERRNO");return e?atoi(e):ENOENT;}
int open(const char*f,int fl,...){static int(*real)(const char*,int,...);if(!real)real=dlsym(RTLD_NEXT,"open");
 va_list ap;va_start(ap,fl);int m=va_arg(ap,int);va_end(ap); if(blocked(f)){errno=err();return -1;} return real(f,fl,m);}
int open64(const char*f,int fl,...){static int(*real)(const char*,int,...);if(!real)real=dlsym(RTLD_NEXT,"open64");
 va_list ap;va_start(ap,fl);int m=va_arg(ap,int);va_end(ap); if(blocked(f)){errno=err();return -1;} return real(f,fl,m);}
int openat(int d,const char*f,int fl,...){static int(*real)(int,const char*,int,...);if(!real)real=dlsym(RTLD_NEXT,"openat");
 va_list ap;va_start(ap,fl);int m=va_arg(ap,int);va_end(ap); if(blocked(f)){errno=err();return -1;} return real(d,f,fl,m);}
int ioctl(int fd,unsigned long req,...){static int(*real)(int,unsigned long,...);if(!real)real=dlsym(RTLD_NEXT,"ioctl");
 va_list ap;va_start(ap,req);void*a=va_arg(ap,void*);va_end(ap);
 if(mode_ioctl()&&req==0x25){errno=atoi(getenv("NOUVM_IOCTL"));return -1;} return real(fd,req,a);}
