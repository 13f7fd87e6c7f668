/* Where a warm `gdrdoctor check` spends its NVML time (issue 37): every NVML call the
 * `live-nvml` worker makes, timed one by one on GPU 0, in the worker's order, with the same
 * calls a second time (what a call costs once the GPU is attached). No nvml.h needed.
 *
 *   gcc -O2 -o nvml-cost scripts/nvml-cost/nvml-cost.c -ldl
 *   ./nvml-cost [flags]     flags: nvmlInitWithFlags' argument (default: nvmlInit_v2)
 *
 * NVML_COST_BUS=0000:01:00.0 takes the handle by PCI bus id instead of by index.
 *
 * Prints one line per call: `call us rc`, and `VAL name value` for what the calls answered
 * (to compare runs under scripts/nvml-cost/nocuda.c). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef void *dev_t_;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static void *h;
static void *sym(const char *n){void*p=dlsym(h,n);if(!p)printf("%s missing\n",n);return p;}
#define T(label, expr) do{double _a=now();int _r=(expr);double _b=now();printf("%-44s %9.1f rc=%d\n",label,_b-_a,_r);tot+=_b-_a;}while(0)
int main(int argc,char**argv){
  double tot=0, t0=now();
  h=dlopen("libnvidia-ml.so.1",RTLD_NOW|RTLD_LOCAL);
  printf("%-44s %9.1f\n","dlopen libnvidia-ml.so.1",now()-t0);
  if(!h){printf("dlopen failed: %s\n",dlerror());return 1;}
  int(*init)(void)=sym("nvmlInit_v2");
  int(*initf)(unsigned)=sym("nvmlInitWithFlags");
  if(argc>1) T("nvmlInitWithFlags", initf((unsigned)strtoul(argv[1],0,0)));
  else T("nvmlInit_v2", init());
  char buf[4096]; unsigned n=0; int cv=0;
  T("nvmlSystemGetDriverVersion", ((int(*)(char*,unsigned))sym("nvmlSystemGetDriverVersion"))(buf,80));
  T("nvmlSystemGetCudaDriverVersion", ((int(*)(int*))sym("nvmlSystemGetCudaDriverVersion"))(&cv));
  T("nvmlSystemGetNVMLVersion", ((int(*)(char*,unsigned))sym("nvmlSystemGetNVMLVersion"))(buf,80));
  T("nvmlDeviceGetCount_v2", ((int(*)(unsigned*))sym("nvmlDeviceGetCount_v2"))(&n));
  printf("gpus %u\n",n);
  if(!n) return 0;
  for(int pass=1;pass<=2;pass++){
    printf("## pass %d\n",pass); double p0=tot;
    dev_t_ d=0;
    const char *bus=getenv("NVML_COST_BUS");
    if(bus&&*bus) T("nvmlDeviceGetHandleByPciBusId_v2", ((int(*)(const char*,dev_t_*))sym("nvmlDeviceGetHandleByPciBusId_v2"))(bus,&d));
    else T("nvmlDeviceGetHandleByIndex_v2", ((int(*)(unsigned,dev_t_*))sym("nvmlDeviceGetHandleByIndex_v2"))(0,&d));
    T("nvmlDeviceGetPciInfo_v3", ((int(*)(dev_t_,void*))sym("nvmlDeviceGetPciInfo_v3"))(d,buf));
    T("nvmlDeviceGetUUID", ((int(*)(dev_t_,char*,unsigned))sym("nvmlDeviceGetUUID"))(d,buf,96)); printf("VAL uuid %s\n",buf);
    int cm=0; T("nvmlDeviceGetComputeMode", ((int(*)(dev_t_,int*))sym("nvmlDeviceGetComputeMode"))(d,&cm)); printf("VAL compute_mode %d\n",cm);
    T("nvmlDeviceGetName", ((int(*)(dev_t_,char*,unsigned))sym("nvmlDeviceGetName"))(d,buf,96)); printf("VAL name %s\n",buf);
    int ma=0,mi=0; T("nvmlDeviceGetCudaComputeCapability", ((int(*)(dev_t_,int*,int*))sym("nvmlDeviceGetCudaComputeCapability"))(d,&ma,&mi)); printf("VAL cc %d.%d\n",ma,mi);
    T("nvmlDeviceGetMemoryInfo", ((int(*)(dev_t_,void*))sym("nvmlDeviceGetMemoryInfo"))(d,buf));
    T("nvmlDeviceGetBAR1MemoryInfo", ((int(*)(dev_t_,void*))sym("nvmlDeviceGetBAR1MemoryInfo"))(d,buf)); printf("VAL bar1 total %llu used %llu\n",((unsigned long long*)buf)[0],((unsigned long long*)buf)[2]);
    unsigned u=0;
    T("nvmlDeviceGetCurrPcieLinkGeneration", ((int(*)(dev_t_,unsigned*))sym("nvmlDeviceGetCurrPcieLinkGeneration"))(d,&u)); printf("VAL pcie_gen %u\n",u);
    T("nvmlDeviceGetMaxPcieLinkGeneration", ((int(*)(dev_t_,unsigned*))sym("nvmlDeviceGetMaxPcieLinkGeneration"))(d,&u));
    T("nvmlDeviceGetCurrPcieLinkWidth", ((int(*)(dev_t_,unsigned*))sym("nvmlDeviceGetCurrPcieLinkWidth"))(d,&u)); printf("VAL pcie_width %u\n",u);
    T("nvmlDeviceGetMaxPcieLinkWidth", ((int(*)(dev_t_,unsigned*))sym("nvmlDeviceGetMaxPcieLinkWidth"))(d,&u));
    int pm=0; T("nvmlDeviceGetPersistenceMode", ((int(*)(dev_t_,int*))sym("nvmlDeviceGetPersistenceMode"))(d,&pm)); printf("VAL persistence %d\n",pm);
    int e1=0,e2=0; T("nvmlDeviceGetEccMode", ((int(*)(dev_t_,int*,int*))sym("nvmlDeviceGetEccMode"))(d,&e1,&e2)); printf("VAL ecc %d pending %d\n",e1,e2);
    T("nvmlDeviceGetRetiredPagesPendingStatus", ((int(*)(dev_t_,int*))sym("nvmlDeviceGetRetiredPagesPendingStatus"))(d,&e1));
    unsigned a,b,c,f; T("nvmlDeviceGetRemappedRows", ((int(*)(dev_t_,unsigned*,unsigned*,unsigned*,unsigned*))sym("nvmlDeviceGetRemappedRows"))(d,&a,&b,&c,&f)); printf("VAL remapped corr %u unc %u pending %u failure %u\n",a,b,c,f);
    T("nvmlDeviceGetPcieReplayCounter", ((int(*)(dev_t_,unsigned*))sym("nvmlDeviceGetPcieReplayCounter"))(d,&u)); printf("VAL replay %u\n",u);
    double l0=tot; int links=0;
    int(*st)(dev_t_,unsigned,int*)=sym("nvmlDeviceGetNvLinkState");
    int(*ver)(dev_t_,unsigned,unsigned*)=sym("nvmlDeviceGetNvLinkVersion");
    int(*rp)(dev_t_,unsigned,void*)=sym("nvmlDeviceGetNvLinkRemotePciInfo_v2");
    int(*rt)(dev_t_,unsigned,unsigned*)=sym("nvmlDeviceGetNvLinkRemoteDeviceType");
    int(*ec)(dev_t_,unsigned,int,unsigned long long*)=sym("nvmlDeviceGetNvLinkErrorCounter");
    for(unsigned l=0;l<18;l++){
      int act=0; double a0=now(); int r=st(d,l,&act); if(r){printf("nvlink %u state rc=%d\n",l,r);break;}
      unsigned long long v=0; ver(d,l,&u);
      if(act){rp(d,l,buf);rt(d,l,&u);for(int k=0;k<4;k++)ec(d,l,k,&v);}
      double a1=now(); tot+=a1-a0; links++; if(l==0)printf("%-44s %9.1f active=%d\n","nvlink 0 (state, version, remote, 4 counters)",a1-a0,act);
    }
    printf("%-44s %9.1f (%d links)\n","nvlink all links",tot-l0,links);
    memset(buf,0,sizeof buf); *(unsigned*)buf = 0; /* v3 size unknown here: use the old call */
    void*fi=dlsym(h,"nvmlDeviceGetGpuFabricInfo");
    if(fi){ T("nvmlDeviceGetGpuFabricInfo", ((int(*)(dev_t_,void*))fi)(d,buf)); printf("VAL fabric %08x %08x %08x %08x\n",((unsigned*)buf)[0],((unsigned*)buf)[4],((unsigned*)buf)[5],((unsigned*)buf)[6]);}
    /* field values, batched: the 18 links' replay counters (field 0x..: NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0 = 21...)*/
    printf("pass %d total %.1f us\n",pass,tot-p0);
  }
  double s0=now(); int(*sd)(void)=sym("nvmlShutdown"); int r=sd(); printf("%-44s %9.1f rc=%d\n","nvmlShutdown",now()-s0,r);
  printf("whole %.1f us\n",now()-t0);
  return 0;
}
