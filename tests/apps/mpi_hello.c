/* A plain MPI program (no elastic code): each rank reports where it runs, then a reduce
   checks that all ranks take part. Compiled with mpicc by the tests. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank, size, sum = 0;
    char host[256] = "?";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *h = getenv("ELASTIC_HOST");
    if (h == NULL) gethostname(host, sizeof host); else snprintf(host, sizeof host, "%s", h);
    int one = rank + 1;
    MPI_Reduce(&one, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    printf("rank %d of %d on %s pid %d\n", rank, size, host, (int)getpid());
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("sum %d\n", sum);
    MPI_Finalize();
    return 0;
}
