// Populate cost of a grown tmpfs range: fresh pages vs pages fallocated ahead (KEEP_SIZE), T threads.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
struct arg { char* p; size_t n; int touch; };
static void* work(void* a_) { struct arg* a=a_; if (a->touch) { for (size_t i=0;i<a->n;i+=4096) a->p[i]=1; } else if (madvise(a->p,a->n,MADV_POPULATE_WRITE)) perror("madvise"); return 0; }
int main(int argc,char**argv){
  size_t sz=(size_t)atol(argv[1])<<20; int pre=atoi(argv[2]); int T=atoi(argv[3]); int touch=argc>4?atoi(argv[4]):0;
  int fd=open("/dev/shm/pop_t",O_RDWR|O_CREAT|O_TRUNC,0600);
  double t0=now();
  if(pre==1 && fallocate(fd,FALLOC_FL_KEEP_SIZE,0,sz)) {perror("fallocate");return 1;}
  double t1=now();
  if (ftruncate(fd,sz)) perror("ftruncate");
  char*p=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);
  pthread_t th[64]; struct arg a[64]; size_t slice=(sz/T+4095)&~4095ul;
  for(int t=0;t<T;t++){ a[t].p=p+t*slice; a[t].n= (t+1)*slice>sz? sz-t*slice: slice; a[t].touch=touch; pthread_create(&th[t],0,work,&a[t]); }
  for(int t=0;t<T;t++) pthread_join(th[t],0);
  double t2=now();
  printf("%4zu MiB pre=%d threads=%2d %s: reserve %.3f s, grow+populate %.3f s (%.2f GB/s)\n",sz>>20,pre,T,touch?"touch":"madvise",t1-t0,t2-t1,sz/1e9/(t2-t1));
  munmap(p,sz); close(fd); unlink("/dev/shm/pop_t");
}
